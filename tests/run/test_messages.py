"""Messages that point the right way: a missing run folder, an empty config file, a size of 0 and an empty JSONL
each get their own message; the math loader names the missing field and counts rows from 1."""

from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.errors import DatasetError
from c3_plugin.run.dry_run import dry_run_report
from c3_plugin.tools.cli import console

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "math" / "demo_cpu.yaml"
TEMPLATE = ROOT / "domains" / "template" / "example.yaml"


def test_audit_of_a_missing_folder_says_the_folder_does_not_exist(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        console(["audit", "--run", str(tmp_path / "no_such_run")])
    out = capsys.readouterr().out
    assert exc.value.code == 2 and "no_such_run: no such folder" in out and "traces.jsonl" not in out


def test_an_empty_config_file_is_named_as_empty(tmp_path):
    (tmp_path / "empty.yaml").write_text("\n# nothing yet\n")
    with pytest.raises(ConfigError, match="empty.yaml is empty; a config names at least its algorithm and domain"):
        load_config(tmp_path / "empty.yaml")


def test_a_size_of_zero_is_named_not_read_as_an_empty_source():
    with pytest.raises(ConfigError, match=r"dataset.train.size is 0: a source needs at least one row"):
        dry_run_report(load_config(TEMPLATE, ["dataset.train.size=0"]))
    with pytest.raises(ConfigError, match=r"dataset.eval\[0\].size is 0: .*or drop the source"):
        dry_run_report(load_config(DEMO, ["dataset.eval=[{'name': 'compare', 'source': 'synthetic', 'size': 0}]"]))


def test_an_empty_jsonl_and_a_row_without_a_field_are_named(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="empty.jsonl is empty \\(no rows\\)"):
        dry_run_report(load_config(DEMO, [f"dataset.train.source={tmp_path / 'empty.jsonl'}"]))
    (tmp_path / "rows.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2"}\n')
    with pytest.raises(DatasetError, match="compare_train: row 2 has no answer field .*non-empty fields: question \\("):
        dry_run_report(load_config(DEMO, [f"dataset.train.source={tmp_path / 'rows.jsonl'}"]))
    (tmp_path / "rows.jsonl").write_text('{"text": "1+1", "answer": "2"}\n')
    with pytest.raises(DatasetError, match="compare_train: row 1 has no question field"):
        dry_run_report(load_config(DEMO, [f"dataset.train.source={tmp_path / 'rows.jsonl'}"]))
