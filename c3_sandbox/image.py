"""The sandbox's own copy of what it reads: the Python standard library, the interpreter, the shared libraries
they load and a few system files, copied once per host process onto a tmpfs (``$C3_SANDBOX_IMAGE_DIR``, else
``/dev/shm``) and mounted by every sandbox as the lower layer of an overlay of its own (``runner.build_root``).

Why a copy and not the host's folders: whatever a candidate does to a file it reads acts on that file's inode,
dentries and page cache. On the host's folders that is the host's kernel state (negative dentries by the
hundred thousand, ``posix_fadvise(DONTNEED)`` evicting the host's Python files, a ``flock`` or the page cache
seen by the next sandbox). On this copy: tmpfs keeps no negative dentry (they are dropped on last use), its
pages are never evicted by ``fadvise`` (so a page-cache probe always reads "resident"), and each sandbox's
overlay is a superblock of its own (its own inodes: a lock or a lease taken in one sandbox is not seen in
another). The copy is read-only inside (an overlay without an upper layer).

Why one copy per concurrent sandbox (:func:`lease`): an overlay's files are its lower layer's inodes as soon as
they are mapped (``mmap`` maps the lower file itself), and some kernel state is keyed by that inode: a
process-shared futex on a mapped page is inode and offset, so two concurrent sandboxes mapping one copy's
``os.py`` could wait and wake each other, an exact channel (round seven). No two sandboxes running at the same time
ever read the same copy: a sandbox leases one for its run (a copy no running sandbox holds, made from the first by
copying when none is free: about 72 MB of tmpfs per copy, as many copies as sandboxes ever ran at once).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading

IMAGE_ENV = "C3_SANDBOX_IMAGE_DIR"  # a folder on a tmpfs for the image; default /dev/shm
TMPFS_MAGIC = 0x01021994
# the parts of the standard library no candidate needs (test suites, GUIs, installers, the static library)
SKIPPED = {"test", "tests", "site-packages", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__phello__"}
SKIPPED_EXTENSIONS = ("_tkinter", "_test", "_xxtest", "xxlimited", "_ctypes_test")
# executables an honest test may start (subprocess) and the system files the loader and time functions read
EXECUTABLES = ("/bin/sh", "/bin/true", "/bin/false", "/usr/bin/env")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
# the C library's own parts, which ctypes users name (found beside libc.so.6)
LIBC_PARTS = ("libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1")
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# the time-zone database (``zoneinfo``, issue 50): the host's, without its duplicate trees and its link out, copied to
# the same place; else the ``tzdata`` package's copy, placed where ``zoneinfo`` looks first (``sysconfig``'s TZPATH)
ZONEINFO_SKIPPED = ("posix", "right", "localtime")


class ImageError(RuntimeError):
    """The image could not be built (no tmpfs to hold it, or a copy failed)."""


def _is_tmpfs(path: str) -> bool:
    buf = ctypes.create_string_buffer(256)  # struct statfs: f_type first (a long)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF == TMPFS_MAGIC


def _stdlib_files(prefix: str) -> list[str]:
    """The standard library's sources, compiled files (non-optimized) and extension modules."""
    lib = os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2])
    tag = sys.implementation.cache_tag
    out = []
    for top, dirs, files in os.walk(lib):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("config-"))
        for name in files:
            if name.endswith(".py") or (name.endswith(".pyc") and f".{tag}." in name and ".opt-" not in name):
                out.append(os.path.join(top, name))
            elif name.endswith(".so") and not name.startswith(SKIPPED_EXTENSIONS):
                out.append(os.path.join(top, name))
    return out


def _needed_libraries(binaries: list[str]) -> set[str]:
    """The shared libraries ``binaries`` load, as the loader names them (``ldd``)."""
    out = set()
    for i in range(0, len(binaries), 64):
        run = subprocess.run(["ldd", *binaries[i:i + 64]], capture_output=True, text=True, timeout=60, check=False,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C"})
        for line in run.stdout.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
                out.add(parts[parts.index("=>") + 1])
            elif parts and parts[0].startswith("/") and not parts[0].endswith(":"):
                out.add(parts[0])  # the loader itself
    return out


def _place(src: str, root: str) -> None:
    """Copy ``src`` (links followed) to the same path under ``root``, its folder's links resolved (the image keeps
    the host's top-level links such as /lib -> usr/lib), with its modification time (a compiled file is valid
    only while its source's time and size match)."""
    dest = os.path.join(root, os.path.realpath(os.path.dirname(src)).lstrip("/"), os.path.basename(src))
    if os.path.lexists(dest):
        return
    os.makedirs(os.path.dirname(dest), 0o755, exist_ok=True)
    real = os.path.realpath(src)
    shutil.copyfile(real, dest)
    st = os.stat(real)
    os.chmod(dest, 0o755 if st.st_mode & 0o111 else 0o644)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))


def build(root: str, prefix: str, python: str) -> None:
    """Fill the empty folder ``root`` with the image."""
    for link in TOP_LINKS:
        if os.path.islink(link):
            os.symlink(os.readlink(link), os.path.join(root, link.lstrip("/")))
    files = _stdlib_files(prefix)
    executables = [e for e in EXECUTABLES if os.path.exists(e)] + [python]
    binaries = [f for f in files if f.endswith(".so")] + [os.path.realpath(e) for e in executables]
    libraries = _needed_libraries(binaries)
    for lib in [x for x in libraries if os.path.basename(x) == "libc.so.6"]:
        libraries |= {p for p in (os.path.join(os.path.dirname(lib), n) for n in LIBC_PARTS) if os.path.exists(p)}
    for path in sorted(set(files) | set(executables) | libraries):
        _place(path, root)
    for path in SYSTEM_FILES:
        if os.path.exists(path):
            _place(path, root)
    _place_zoneinfo(root)
    for top, dirs, _ in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(top, d), 0o755)
    os.chmod(root, 0o755)


def zoneinfo_source() -> tuple[str, str] | None:
    """(the folder of a time-zone database on this host, where the image puts it), or None where there is none."""
    tzpath = [p for p in (sysconfig.get_config_var("TZPATH") or "").split(os.pathsep) if os.path.isabs(p)]
    for folder in tzpath:
        if os.path.isfile(os.path.join(folder, "Etc", "UTC")):
            return os.path.realpath(folder), folder
    spec = importlib.util.find_spec("tzdata")
    if spec is not None and spec.submodule_search_locations and tzpath:
        folder = os.path.join(list(spec.submodule_search_locations)[0], "zoneinfo")
        if os.path.isfile(os.path.join(folder, "Etc", "UTC")):
            return folder, tzpath[0]
    return None


def _place_zoneinfo(root: str) -> None:
    """The time-zone database into the image (nothing where the host has none: ``zoneinfo`` then fails inside)."""
    found = zoneinfo_source()
    if found is None:
        return
    src, where = found
    dest = os.path.join(root, os.path.realpath(os.path.dirname(where)).lstrip("/"), os.path.basename(where))
    if not os.path.lexists(dest):
        shutil.copytree(src, dest, symlinks=True,
                        ignore=lambda folder, names: [n for n in names if n in ZONEINFO_SKIPPED or n == "__pycache__"
                                                      or n.endswith(".py")])


_IMAGES: dict[tuple[str, str], str] = {}  # the first copy of each installation's image
_FREE: dict[tuple[str, str], list[str]] = {}  # copies no running sandbox holds
_COPIES: list[str] = []  # every copy this process made (removed at exit)
_LOCK = threading.Lock()


def _new_root(base: str) -> str:
    root = os.path.join(base, f"c3-image-{os.getpid()}-{len(_COPIES)}")
    if os.path.lexists(root):
        shutil.rmtree(root)
    if not _COPIES:
        atexit.register(remove_all)
    _COPIES.append(root)
    return root


def image_for(prefix: str, python: str) -> str:
    """The first image of this Python installation (built on first use in this process, removed at its exit): what a
    pool checks it can build; a sandbox runs on a copy it leases (:func:`lease`)."""
    key = (prefix, python)
    with _LOCK:
        if key in _IMAGES and os.path.isdir(_IMAGES[key]):
            return _IMAGES[key]
        base = os.environ.get(IMAGE_ENV) or "/dev/shm"
        if not os.path.isdir(base) or not _is_tmpfs(base):
            raise ImageError(f"the sandbox image needs a folder on a tmpfs: {base} is not one. Set ${IMAGE_ENV} to a "
                             "writable folder on a tmpfs (for example under /dev/shm or /run/user/<uid>)")
        _remove_stale(base)
        root = _new_root(base)
        try:
            os.mkdir(root, 0o700)
            build(root, prefix, python)
        except (OSError, subprocess.SubprocessError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise ImageError(f"the sandbox image could not be built in {base}: {type(exc).__name__}: {exc}") from exc
        _IMAGES[key] = root
        _FREE[key] = [root]
        return root


@contextlib.contextmanager
def lease(prefix: str, python: str):
    """A copy of the image that no other sandbox uses while this one runs (see the module docstring): a free copy,
    else a new one copied from the first (links kept, modes and times with them: a compiled file stays valid)."""
    key = (prefix, python)
    first = image_for(prefix, python)
    with _LOCK:
        free = _FREE.setdefault(key, [])
        root = free.pop() if free else None
        if root is None or not os.path.isdir(root):
            root = _new_root(os.path.dirname(first))
            try:
                shutil.copytree(first, root, symlinks=True)
                os.chmod(root, 0o755)
            except OSError as exc:
                shutil.rmtree(root, ignore_errors=True)
                raise ImageError(f"a copy of the sandbox image could not be made in {os.path.dirname(first)}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    try:
        yield root
    finally:
        with _LOCK:
            _FREE.setdefault(key, []).append(root)


def _remove_stale(base: str) -> None:
    """Images of processes of this user that no longer run."""
    for name in os.listdir(base):
        parts = name.split("-")
        if len(parts) == 4 and parts[:2] == ["c3", "image"] and parts[2].isdigit():
            path = os.path.join(base, name)
            try:
                if os.lstat(path).st_uid == os.geteuid() and not os.path.exists(f"/proc/{parts[2]}"):
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass


def remove_all() -> None:
    with _LOCK:
        for root in _COPIES:
            shutil.rmtree(root, ignore_errors=True)
        _COPIES.clear()
        _IMAGES.clear()
        _FREE.clear()
