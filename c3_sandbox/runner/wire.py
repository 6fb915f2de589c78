"""The job protocol, the box's side: the values a test sends back (``encode``: builtin data only, checked by
``tree_ok`` on the way out), the probes a test evaluates, and the protocol's bounds (one part of the runner program:
``c3_sandbox/runner/__init__.py``)."""

import base64
import collections
import json
import os
import sys

MAX_DEPTH = 64
MAX_ITEMS = 100000
MAX_CHARS = 1 << 24  # characters of leaf text (str, bytes, digits) in one value
INSIDE_UID = 1000  # the only uid (and gid) inside the sandbox's user namespace
MAX_REASON = 500  # characters of an error reason kept


class Unsupported(Exception):
    pass


class SetupError(Exception):
    """The sandbox could not be built (reported to the host, which raises SandboxError)."""


# Standard-library containers accepted as plain data, captured before any candidate code runs.
TRUSTED = {collections.Counter: "dict", collections.OrderedDict: "dict", collections.defaultdict: "dict",
           collections.deque: "list"}


def encode(value, depth=0, budget=None):
    """Builtin data -> JSON-able tagged tree; anything else raises Unsupported."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise Unsupported("result too deep or too large")
    t = type(value)
    if value is None:
        return ["none"]
    if t is bool:
        return ["bool", value]
    if t is int:
        return ["int", str(value)]
    if t is float:
        return ["float", repr(value)]
    if t is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if t is str:
        return ["str", value]
    if t is bytes:
        return ["bytes", base64.b64encode(value).decode()]
    kind = TRUSTED.get(t)
    if kind == "dict":
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in dict.items(value)]]
    if kind == "list":
        return ["list", [encode(v, depth + 1, budget) for v in list(value)]]
    if t in (list, tuple, set, frozenset):
        items = [encode(v, depth + 1, budget) for v in value]
        if t in (set, frozenset):
            items.sort(key=lambda x: json.dumps(x))
        return [t.__name__, items]
    if t is dict:
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()]]
    raise Unsupported("result of type %s.%s is not plain builtin data" % (t.__module__, t.__qualname__))


def decode(node):
    """Inverse of ``encode`` for the call arguments the host sends (trusted data: tuples, sets and
    complex numbers arrive as themselves)."""
    tag = node[0]
    if tag == "none":
        return None
    if tag in ("bool", "int", "float", "str"):
        return {"bool": bool, "int": int, "float": float, "str": str}[tag](node[1])
    if tag == "complex":
        return complex(float(node[1]), float(node[2]))
    if tag == "bytes":
        return base64.b64decode(node[1])
    if tag == "dict":
        return dict((decode(k), decode(v)) for k, v in node[1])
    return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(x) for x in node[1])


PLAIN = (list, tuple, set, frozenset, dict, str, bytes) + tuple(TRUSTED)


def probes_of(test):
    """A payload's probes as (expression source or (function name, arguments), mode), and whether it
    wants the tuple of their values (``probes``) or one value (``expr``; ``entry_point`` and JSON ``args``)."""
    if "probes" not in test:
        if "expr" in test:
            return [(test["expr"], "value")], False
        return [((test["entry_point"], list(test["args"])), "value")], False
    return [(p["expr"] if "expr" in p else (p["call"], decode(p["args"])), p.get("mode", "value"))
            for p in test["probes"]], True


def probe_values(probes, env, trusted):
    """Evaluate each probe in the candidate's namespace ``env`` and report it in its mode
    (``assertions.py``). ``trusted``: bool, list, callable and type as they were
    before any candidate code ran."""
    bool_, list_, callable_, type_ = trusted
    values = []
    for what, mode in probes:
        if isinstance(what, str):
            value = eval(compile(what, "<test>", "eval"), env)
        else:
            fn = env.get(what[0])
            if not callable_(fn):
                raise NameError("function %r is not defined" % what[0])
            value = fn(*what[1])
        if mode == "truth":
            value = bool_(value)
        elif mode == "callable":
            value = callable_(value)
        elif mode == "present":  # EvalPlus's oracle for tasks that return a match object or None
            value = value if type_(value) is bool_ else value is not None
        elif mode == "iter" and type_(value) not in PLAIN:
            try:
                value = list_(value)  # a generator, map or dict view: its items
            except TypeError:
                pass  # not iterable: reported as it is (rejected unless plain)
        values.append(value)
    return values


def evaluate(job, test):
    """Run the candidate code (then the setup) and evaluate one test payload: the message to send.
    The payload holds the candidate's inputs only (expected values, their sizes and the test's time limit
    never enter the sandbox); the other tests' payloads are dropped from this child before any candidate
    code runs."""
    tests = job.get("tests")
    if isinstance(tests, list):
        tests.clear()
    env = {"__name__": "__candidate__", "__builtins__": __builtins__}
    trusted = (bool, list, callable, type)  # taken before the candidate can replace builtins
    try:
        probes, several = probes_of(test)  # call arguments decoded before any candidate code runs
        exec(compile(job["code"], "<candidate>", "exec"), env)
        if job.get("setup"):  # MBPP's test setup runs after the code it tests (it may use its classes)
            exec(compile(job["setup"], "<setup>", "exec"), env)
        values = probe_values(probes, env, trusted)
        return {"status": "value", "value": encode(tuple(values) if several else values[0])}
    except Unsupported as exc:
        return {"status": "error", "reason": "unsupported result: %s" % exc}
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: no value, no pass
        return {"status": "error", "reason": "%s: %s" % (type(exc).__name__, str(exc)[:300])}


# ---------------------------------------------------------------------------------------------
# The kernel interfaces (Linux), through libc

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000


LEAVES = {"none": 0, "bool": 1, "int": 1, "float": 1, "complex": 2, "str": 1, "bytes": 1}
CONTAINERS = ("list", "tuple", "set", "frozenset", "dict")


def tree_ok(node):
    """Whether ``node`` (a test child's message, parsed) is a tagged tree :func:`encode` could have made,
    within its bounds: at most MAX_ITEMS nodes, MAX_DEPTH levels and MAX_CHARS characters of leaf text.
    A child may write anything to its pipe; the host gets only what passes this (iterative; stops at the
    first node over a bound, so a forged report costs the host nothing)."""
    items, chars, stack = 0, 0, [(node, 0)]
    while stack:
        item, depth = stack.pop()
        items += 1
        if items > MAX_ITEMS or depth > MAX_DEPTH or type(item) is not list or not item or type(item[0]) is not str:
            return False
        tag = item[0]
        if tag in LEAVES:
            if len(item) != LEAVES[tag] + 1:
                return False
            for leaf in item[1:]:
                if tag == "bool":
                    if type(leaf) is not bool:
                        return False
                elif type(leaf) is not str:
                    return False
                else:
                    chars += len(leaf)
            if chars > MAX_CHARS:
                return False
        elif tag in CONTAINERS:
            if len(item) != 2 or type(item[1]) is not list or len(item[1]) > MAX_ITEMS:
                return False
            if tag == "dict":
                for pair in item[1]:
                    if type(pair) is not list or len(pair) != 2:
                        return False
                    stack.append((pair[0], depth + 1))
                    stack.append((pair[1], depth + 1))
            else:
                stack.extend((x, depth + 1) for x in item[1])
        else:
            return False
    return True


def parse_message(data):
    """The child's bytes -> a clean message, or None when they are not one."""
    try:
        msg = json.loads(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - malformed, too deep, not UTF-8: the child sent no message
        return None
    if not isinstance(msg, dict) or msg.get("status") not in ("value", "error"):
        return None
    if msg["status"] == "error":
        return {"status": "error", "reason": str(msg.get("reason", ""))[:MAX_REASON]}
    if "value" not in msg or not tree_ok(msg["value"]):
        return None
    return {"status": "value", "value": msg["value"]}


NOT_RUN = "not run: test %d ran out of time before it"


def send(msg):
    """The test child's one message to the runner (fd 3)."""
    try:
        data = json.dumps(msg).encode()
    except BaseException as exc:  # noqa: BLE001
        data = json.dumps({"status": "error", "reason": "unsendable result: %s" % type(exc).__name__}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(3, view):]


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


CONTROL = {"buffer": b"", "kill": set(), "budget": False}  # what the host said on stdin (see the module docstring)


def read_control():
    """Read what the host wrote on stdin: ``K <i>`` (test ``i`` ran out of time), ``B`` (the candidate's budget is
    spent). End of file (the host is gone) counts as ``B``."""
    try:
        chunk = os.read(0, 4096)
    except BlockingIOError:
        return
    if not chunk:
        CONTROL["budget"] = True
        return
    CONTROL["buffer"] += chunk
    *lines, CONTROL["buffer"] = CONTROL["buffer"].split(b"\n")
    for line in lines:
        if line == b"B":
            CONTROL["budget"] = True
        elif line.startswith(b"K "):
            CONTROL["kill"].add(int(line[2:]))
