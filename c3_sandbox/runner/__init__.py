"""The in-sandbox test runner (stdlib only): one program, in parts by concern.

The parts, in the order :func:`source` joins them into the one program the box runs (``wire``: the job protocol's
values and bounds; ``build``: the box and its limits; ``seccomp``: the system-call filter; ``accounting``: CPU time and
the wait for a result; ``loop``: the tests and ``main``). Each part is also a module the host imports (the filter is
compiled there, values are encoded with ``wire.encode``); a part imports another's names with a relative
``from .part import ...`` line, which :func:`source` drops, as the joined program defines them all.

The host starts it as ``python -P -s -S -B -c <source()>`` with an environment it
writes from scratch (no folder the candidate can write is ever on ``sys.path``; ``-I`` is not
used because it would also ignore ``PYTHONHASHSEED``, which keeps set and dict orders equal
between reference and candidate), writes one JSON job to its stdin (a line with its length in bytes,
then the job) and reads its stdout: ``READY`` once the sandbox is built, before any candidate code
runs, ``S <i>`` before test ``i`` starts, ``C <i> <seconds>`` with its CPU time so far while it runs (see
:func:`wait_result`) and ``E <i>`` when it has ended, then one JSON line with
one result per test payload, in order: ``{"status": "value", "value": <encoded>}`` or
``{"status": "error" | "timeout", "reason": ...}``, each with ``output``.
A job with ``"probe": true`` builds the sandbox and reports what it could build instead.

The job holds the candidate's inputs and limits that are the same for every test, nothing computed
from an expected value or a reference solution: the host keeps each test's time limit and value cap
(issue 39). It times each test from the ``S``/``E`` lines and, at a test's limit (CPU time from the ``C``
lines, or its wall-clock ceiling: issue 41), writes ``K <i>`` on
the runner's stdin (kill test ``i``: a timeout), or ``B`` when the candidate's whole budget is spent
(kill it, skip the rest); a value over its test's cap is refused by the host, before decoding. What
the runner never holds, no test child (a fork of it) can find in its memory.

Building the sandbox (``isolation: namespaces``), before any candidate code runs:

* new user, mount, PID, network, IPC, UTS and cgroup namespaces. The only uid inside is 1000,
  mapped to the host user, or to a uid leased for this sandbox alone when the host is root
  (the runner then starts as root only to have that mapping written); nothing inside is root
  or has a capability over any host file;
* a new root: a read-only overlay of this box alone over a small tmpfs (the mount points) and the
  pool's image (``image.py``: a tmpfs copy of the Python installation and what it loads; no host
  folder is bound in); the null/zero/full/random/urandom devices (a root host: nodes of the box's
  own) on read-only, nosuid, noexec bind mounts (nothing inside can change their owner, mode or
  kind); the runner's own ``/proc``, which candidates do not get; a fresh size-capped tmpfs per test
  at ``/sandbox`` (also ``/tmp``), a new IPC namespace and the pid counter set back per test.
  ``pivot_root`` then detaches the host's tree, so there is no
  outside to escape to, and the new root is remounted read-only;
* this process becomes the PID namespace's init: it cannot be signalled, traced or read
  (``/proc/1``) from inside; after every test it kills every other process of the namespace,
  and when it exits the kernel kills whatever is left.

Each test runs in a forked child that gets a fresh ``/sandbox``, keeps only stdin (``/dev/null``),
its output (stdout and stderr: an anonymous memory file, size-capped by ``RLIMIT_FSIZE``) and
its result pipe (fd 3), is not dumpable (no core, whatever the host's ``core_pattern``), sets
``no_new_privs``, drops every capability (bounding, ambient, inheritable, permitted, effective),
applies its resource limits (``RLIMIT_CORE`` 1), loads the system-call filter (:func:`syscall_filter`: an allow-list
built with libseccomp, compiled by the host and sent in the job) and only then executes the candidate code. It sends
back the *value*, encoded as plain builtin data: only builtin types encode (exact type checks, so a subclass or an
object with a rigged ``__eq__`` is rejected); the expected values never enter the sandbox and the comparison happens in
the host. A child that exits early, raises anything, is killed by any signal or sends a malformed message gets an
error result and passes nothing; the runner goes on to the next test, unless the host killed this one at its limit
(then no later test runs: :data:`NOT_RUN`).

The runner never opens, reads, changes or removes anything by a name the candidate controls:
the output file has no name, results come through a pipe, and the box is a tmpfs that goes
away with the mount namespace. ``isolation: none`` (explicitly configured; unsafe) skips the
namespaces: the host makes a private folder for the box, and when the host is root the
runner first becomes the leased uid.
"""

import re
from pathlib import Path

from .wire import MAX_CHARS, MAX_DEPTH, MAX_ITEMS, MAX_REASON, NOT_RUN, encode

PARTS = ("wire", "build", "seccomp", "accounting", "loop")
HERE = Path(__file__).parent
# a part's import of another part: dropped from the joined program (one line, or a parenthesised list)
_PART_IMPORT = re.compile(r"^from \.\w* import (\([^)]*\)|[^\n]*)\n", re.M)


def source(read=None):
    """The runner program: its parts joined, their imports of each other dropped. ``read(part)``: a part's text
    (default: this folder's ``<part>.py``; the bench reads another revision's through git)."""
    read = read or (lambda part: (HERE / (part + ".py")).read_text())
    return "\n\n".join(_PART_IMPORT.sub("", read(part)) for part in PARTS)


__all__ = ["MAX_CHARS", "MAX_DEPTH", "MAX_ITEMS", "MAX_REASON", "NOT_RUN", "PARTS", "encode", "source"]
