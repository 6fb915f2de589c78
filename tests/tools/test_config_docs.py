"""docs/config.md is generated from the config dataclasses, and every field this project defines has its doc line."""

import dataclasses

from c3_plugin.core.config import SECTIONS
from c3_plugin.tools import config_docs
from c3_plugin.trainers.c3 import C3Config


def test_docs_config_md_is_what_the_dataclasses_give():
    assert (config_docs.DOC.read_text() == config_docs.render()), ("docs/config.md is stale: run python -m "
                                                                   "c3_plugin.tools.config_docs")
    assert config_docs.main(["--check"]) == 0


def test_every_field_the_project_defines_has_a_doc_line():
    assert config_docs.undocumented() == []


def test_docs_come_from_the_comment_where_the_default_is():
    docs = config_docs.field_docs(C3Config)
    assert docs["ppo_epochs"] == "passes over each rollout batch"  # WorkflowConfig's comment, inherited
    assert docs["plan"].startswith("C3 needs groups")  # C3Config's own, where it redefines the default
    assert "CoMLRL's `comlrl" in docs["num_train_epochs"] and "epoch loop" in docs["num_train_epochs"]  # CoMLRL's field
    text = config_docs.render()
    for name, cls in SECTIONS.items():  # every section and field appears
        assert f"## `{name}:`" in text
        assert all(f"| `{f.name}` |" in text for f in dataclasses.fields(cls))


def test_a_field_without_a_doc_is_found():
    @dataclasses.dataclass
    class Section:
        documented: int = 1  # says what it does
        bare: int = 2

    docs = config_docs.field_docs(Section)
    assert docs == {"documented": "says what it does", "bare": ""}
