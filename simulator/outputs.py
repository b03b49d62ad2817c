"""Every file mfusim writes goes through here (issue 18).

Three guarantees, one module:

* **No clobbering.** `check_output` refuses an output path that is one of the command's
  inputs — compared by resolved path *and* by (device, inode), so a symlink or a hard link
  to the scenario, its topology file or its config.json is caught too — and a path that is
  a directory, a named pipe, a socket or a device other than /dev/null-style character
  devices. It also makes sure the directory is writable *without* creating the file, so a
  command that fails or is interrupted later leaves no empty output behind.
* **Atomic replacement.** `atomic_output` writes to a temporary file in the same directory
  and renames it over the target only when the writer finished without an exception
  (`os.replace` is atomic on POSIX): an interrupted command leaves either the old file
  (or nothing) or the complete new one, never a torn or empty one.
* **One writer.** `output_lock` takes an exclusive, non-blocking `fcntl.flock` on
  `FILE.lock`; a second command writing the same `--out` is refused with one line instead
  of interleaving rows. The kernel drops the lock when its holder dies, so a killed sweep
  never leaves a stale lock behind (the lock file itself is removed on a clean exit).

OS errors while writing (disk full, permission denied, read-only file system) become a
`ConfigError` naming the file and the flag, like any other problem a user can fix.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError

LOCK_SUFFIX = ".lock"


def _describe_os_error(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device (disk full)"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return exc.strerror or str(exc)


def _stat(path: Path, follow: bool = True) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when `a` and `b` name the same file: the same resolved path or the same inode
    (a hard link, a symlink, a bind mount)."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
    except (OSError, RuntimeError, ValueError):
        pass
    sa, sb = _stat(Path(a)), _stat(Path(b))
    return sa is not None and sb is not None and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


STDOUT_DASH = "-"


def refuse_dash(name: str, flag: str) -> None:
    """Refuse `-` as an output name. Unix tools read it as standard output, but mfusim's standard
    output carries the report (or the `--json` object), so writing the file there would mix two
    documents; and writing a file literally named '-' is never what was meant."""
    if name == STDOUT_DASH:
        raise ConfigError(
            "'-' (standard output) is not an output file here: standard output carries the report; "
            "give a file name",
            key=flag,
        )


def check_output(path: str | Path, flag: str, inputs: Iterable[str | Path] = ()) -> Path:
    """Check, before any work, that `path` can be written by flag `flag` without harming an
    input. Creates nothing. Returns the path."""
    p = Path(path)
    name = str(path)
    if not name:
        raise ConfigError("empty file name", key=flag)
    refuse_dash(name, flag)
    for inp in inputs:
        if inp is not None and same_file(p, inp):
            raise ConfigError(
                f"{name} is an input of this command ({inp}); writing it would destroy it — give another file",
                key=flag,
            )
    st = _stat(p)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{name} is a directory; give a file name", key=flag)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise ConfigError(f"{name} is not a regular file (a pipe, socket or device)", key=flag)
        if stat.S_ISCHR(st.st_mode):
            return p  # /dev/null and friends: written directly (see atomic_output)
    elif _stat(p, follow=False) is not None:
        raise ConfigError(f"{name} is a broken symbolic link", key=flag)
    parent = _parent(p)
    pst = _stat(parent)
    if pst is None:
        raise ConfigError(f"directory {parent} does not exist", key=flag)
    if not stat.S_ISDIR(pst.st_mode):
        raise ConfigError(f"{parent} is not a directory", key=flag)
    if st is not None and not os.access(p, os.W_OK):
        raise ConfigError(f"cannot write {name}: permission denied", key=flag)
    # can we create the temporary file next to it? (try it: access() ignores read-only mounts)
    try:
        fd, tmp = _mkstemp(prefix=f".{p.name[:40]}.", suffix=".check", dir=parent)
    except OSError as exc:
        raise ConfigError(f"cannot write in {parent}: {_describe_os_error(exc)}", key=flag) from None
    os.close(fd)
    os.unlink(tmp)
    return p


def _parent(p: Path) -> Path:
    real = Path(os.path.realpath(p))  # a symlinked output is written where it points
    return real.parent


def _direct(p: Path) -> bool:
    st = _stat(p)
    return st is not None and stat.S_ISCHR(st.st_mode)


def atomic_output(
    path: str | Path, flag: str, mode: str = "w", *, newline: str | None = None
) -> contextlib.AbstractContextManager[IO[Any]]:
    """A file object (text for mode "w", binary for "wb") to write `path`'s new content;
    renamed into place only when the `with` block ends without an exception."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    return _atomic_output(Path(path), flag, mode, newline)


def _open_fd(fd: int, mode: str, newline: str | None) -> IO[Any]:
    if mode == "wb":
        return os.fdopen(fd, "wb")
    return os.fdopen(fd, "w", encoding="utf-8", newline=newline)


@contextlib.contextmanager
def _atomic_output(p: Path, flag: str, mode: str, newline: str | None) -> Iterator[IO[Any]]:
    if _direct(p):  # a character device such as /dev/null: nothing to rename
        try:
            with _open_fd(os.open(p, os.O_WRONLY | os.O_CLOEXEC), mode, newline) as fh:
                yield fh
        except OSError as exc:
            raise write_error(p, flag, exc) from None
        return
    target = Path(os.path.realpath(p))
    old = _stat(target)
    tmp: str | None = None
    try:
        fd, tmp = _mkstemp(prefix=f".{target.name[:40]}.", suffix=".tmp", dir=target.parent)
        # mkstemp makes the file 0600: give the result the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~umask)
        with _open_fd(fd, mode, newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise write_error(p, flag, exc) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def atomic_path(path: str | Path, flag: str) -> Iterator[Path]:
    """A temporary path next to `path`, with the same suffixes (so writers that pick a format
    from the name — matplotlib, gzip — still do), renamed over `path` when the block ends
    without an exception and removed otherwise. For writers that want a file name."""
    p = Path(path)
    if _direct(p):
        try:
            yield p
        except OSError as exc:
            raise write_error(p, flag, exc) from None
        return
    target = Path(os.path.realpath(p))
    old = _stat(target)
    suffix = "".join(target.suffixes[-2:]) if len(target.name) > 1 else ""
    try:
        fd, tmp_name = _mkstemp(prefix=f".{target.name[:40]}.", suffix=f".tmp{suffix}", dir=target.parent)
    except OSError as exc:
        raise write_error(p, flag, exc) from None
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~umask)
        os.close(fd)
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        raise write_error(p, flag, exc) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_error(path: str | Path, flag: str, exc: OSError) -> ConfigError:
    """An OS error while writing `path`, as a one-line error naming the file and the flag."""
    return ConfigError(f"cannot write {path}: {_describe_os_error(exc)}", key=flag)


def write_text(path: str | Path, flag: str, text: str) -> None:
    """Write `text` to `path` atomically (see `atomic_output`)."""
    with atomic_output(path, flag) as fh:
        fh.write(text)


@contextlib.contextmanager
def output_lock(path: str | Path, flag: str) -> Iterator[Path]:
    """Hold an exclusive lock on `path` (as `path.lock`) for the duration; a second holder is
    refused with a ConfigError at once (no waiting, no interleaving)."""
    p = Path(path)
    if _direct(p):
        yield p
        return
    target = Path(os.path.realpath(p))
    lock = target.with_name(target.name + LOCK_SUFFIX)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the lock file {lock}: {_describe_os_error(exc)}", key=flag
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(
                    f"{path} is being written by another mfusim process (lock {lock}); "
                    "wait for it to finish or give another file",
                    key=flag,
                ) from None
            raise ConfigError(f"cannot lock {lock}: {_describe_os_error(exc)}", key=flag) from None
        # The holder before us may have removed the lock file after we opened it: then our
        # lock is on an unlinked inode and means nothing. Check and retry.
        held, now = os.fstat(fd), _stat(lock)
        if now is not None and (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            break
        os.close(fd)
    try:
        yield p
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _mkstemp(**kw: Any) -> tuple[int, str]:
    import tempfile  # only when a file is written (start-up time of `run --json`)

    return tempfile.mkstemp(**kw)
