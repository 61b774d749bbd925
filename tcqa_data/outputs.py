"""Output folders: the names joined into them, where they may lead, and how they are committed.

Every stage writes folders whose names come from outside: task and split names from task YAMLs
(ours or third-party lm-eval ones) and ``--data-files``, model names from ``--model``. This module
is the one place that decides which names may become a folder, checks that a path built from them
stays inside its output folder, and writes a folder whole or not at all (a staging folder beside it,
then one rename). Single files are written atomically by :mod:`tcqa_data.io_utils`.

It imports nothing from the stages, so every stage can use it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import gc
import hashlib
import inspect
import json
import os
import re
import secrets
import shutil
import stat
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar

from tcqa_data.errors import ConfigError, TcqaError

F = TypeVar("F", bound=Callable[..., Any])

# Most file systems take 255 bytes per name; longer names fail with an OSError deep in a write.
MAX_NAME_BYTES = 255
# Staging folders start with this, so a reader that lists an output folder can tell them apart
# (a run killed before its commit leaves one behind; issue 30 cleans them up).
STAGING_PREFIX = ".tcqa-staging-"
_RETIRED_PREFIX = ".tcqa-retired-"
# Written into every committed output folder: the command and the format that own it. A command
# writes only into a folder that does not exist, is empty, or carries its own marker
# (:func:`check_owned`).
OWNER_MARKER = ".tcqa-output.json"
# Names from outside never start with this: staging, retired and marker names are the house's own.
_HOUSE_PREFIX = ".tcqa-"
# Bidirectional controls reorder how a name prints (a task "evil\u202eyaml.py" shows as "evilyp.lmay"):
# refused with the C0/C1 controls, so the name a user reads is the name on disk.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def name_problem(name: object, reserved: tuple[str, ...] = (), longest_use: str = "{}") -> str | None:
    """Why ``name`` cannot be one folder name inside an output folder, or None when it can.

    Refused: empty, ``.`` or ``..``, any path separator (``/`` or ``\\``, whatever the OS), a
    drive or absolute path, control and bidirectional-control characters, the house's own
    ``.tcqa-`` names, a name in ``reserved`` (the files the folder that holds it has of its own),
    characters that are not text (undecodable bytes of a file name), and a name whose longest use
    (``longest_use``, a file name built from it: ``"tcqa_{}_clean.yaml"``) is past
    :data:`MAX_NAME_BYTES`.
    """
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if not name.strip():
        return "is empty"
    if "\x00" in name:
        return "holds a NUL character"
    win = PureWindowsPath(name)
    if PurePosixPath(name).is_absolute() or win.is_absolute() or win.drive:
        return "is an absolute path"
    if "/" in name or "\\" in name or (os.altsep and os.altsep in name):
        return "holds a path separator"
    if name in (".", ".."):
        return f"is {name!r}, which names a folder above or the folder itself"
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cs") or c in _BIDI_CONTROLS), None)
    if bad is not None:
        what = "an undecodable byte" if unicodedata.category(bad) == "Cs" else "a control character"
        return f"holds {what} ({bad!r})"
    if name.startswith(_HOUSE_PREFIX):
        return f"starts with {_HOUSE_PREFIX!r}, which names tcqa-data's own staging and marker files"
    if name in reserved:
        return "is the name of a file the folder holds of its own"
    longest = longest_use.format(name)
    if len(longest.encode("utf-8")) > MAX_NAME_BYTES:
        built = "" if longest == name else f" as part of the file name {longest_use.format('<name>')!r}"
        return f"is longer than {MAX_NAME_BYTES} bytes{built}"
    return None


def check_name(name: object, kind: str, source: str, reserved: tuple[str, ...] = (),
               longest_use: str = "{}") -> str:
    """``name`` when it is a valid folder name, else a ConfigError naming it, its kind and its source.

    ``kind``: "task name", "split name", ...; ``source``: where it came from, as the user would
    recognise it ("--data-files", "task YAML my_task.yaml", "prep_manifest.json"); ``reserved``,
    ``longest_use``: as :func:`name_problem`.
    """
    problem = name_problem(name, reserved, longest_use)
    if problem is not None:
        # repr: control, bidi and undecodable characters print escaped
        raise ConfigError(f"{kind} {name!r} from {source} is not a valid folder name: it {problem}")
    return name  # type: ignore[return-value]  # name_problem refused every non-str


def resolve_inside(root: str | os.PathLike, *parts: str | os.PathLike, what: str = "path") -> Path:
    """``root`` joined with ``parts``, after checking that it resolves to a path inside ``root``.

    Resolving follows symlinks and ``..``, so neither an absolute part, a ``..`` nor a link that
    points elsewhere can lead out. The returned path is the plain join (not the resolved one), so
    the paths a stage prints or records do not change. Raises TcqaError naming ``what``.
    """
    root = Path(root)
    joined = root.joinpath(*parts)
    base = root.resolve()
    target = joined.resolve()
    if target != base and base not in target.parents:
        rel = "/".join(os.fspath(p) for p in parts)
        raise TcqaError(f"{what} {rel!r} leads outside the output folder {root} (to {target}); refused")
    return joined


def relative_inside(root: str | os.PathLike, relative: object, what: str) -> Path:
    """A path read from a file (a manifest) that must be relative and inside ``root``: ``root / relative``.

    Refused with a TcqaError naming ``what``: anything but a non-empty string, an absolute path, a
    ``..`` part, and a path that resolves outside ``root`` (through a link).
    """
    if not isinstance(relative, str) or not relative.strip() or "\x00" in relative:
        raise TcqaError(f"{what} is {relative!r}, not a relative path inside {root}")
    posix, win = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or win.is_absolute() or win.drive or ".." in posix.parts or ".." in win.parts:
        raise TcqaError(f"{what} is {relative!r}: it must be a relative path inside {root}")
    return resolve_inside(root, relative, what=what)


def safe_model_dirname(model_name: str) -> str:
    """A model name as one folder name: deterministic, never ``.``/``..``, never a path.

    Runs of characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_`` (so
    ``org/name`` is ``org_name``, as evaluate has always named it); a name of dots only (``..``)
    becomes ``model`` and an empty one too; a name past the length limit keeps its start plus a
    digest of the whole name, so two long names stay apart.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("_")
    if not safe.strip("."):  # "", ".", "..", "...": no name of its own, and "." or ".." would lead up
        safe = "model"
    if len(safe) > MAX_NAME_BYTES:  # only ASCII is left, so characters are bytes
        digest = hashlib.sha256(model_name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        safe = f"{safe[:MAX_NAME_BYTES - 17]}_{digest}"
    return safe


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _unwritable(folder: Path) -> str:
    """Why a folder ``os.access`` says cannot be written: its file system is read-only, or no
    permission."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied"


def check_output_dir(out: Path) -> None:
    """``out`` is a folder or can be created as one, and is writable; checked without writing.
    Its path is text (no undecodable bytes: manifests and reports record it) and its name fits
    the file system."""
    text = os.fspath(out)
    if text != os.fsencode(text).decode("utf-8", "replace"):
        raise ConfigError(f"{ascii(text)[1:-1]}: the output path is not valid UTF-8 (undecodable bytes); "
                          "choose another")
    if any(len(os.fsencode(part)) > MAX_NAME_BYTES for part in Path(out).parts):
        raise ConfigError(f"{out}: a folder name of the output path is longer than {MAX_NAME_BYTES} "
                          "bytes; choose a shorter one")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    anchor = _nearest_existing(out)
    if not anchor.is_dir():
        raise ConfigError(f"{out}: cannot create it, {anchor} is a file")
    if not os.access(anchor, os.W_OK | os.X_OK):
        where = "" if anchor == out.absolute() else f" ({anchor}, where it would be created, is not writable)"
        raise TcqaError(f"cannot write the output folder {out}: {_unwritable(anchor)}{where}")


def check_apart(out: str | os.PathLike, other: str | os.PathLike, what: str, option: str) -> None:
    """The output folder ``out`` is not ``other`` (an input folder: an index, a PREP_DIR), does not
    lie inside it and does not hold it: committing ``out`` whole would change or swap it away."""
    target, folder = Path(os.path.realpath(out)), Path(os.path.realpath(other))
    if target == folder or folder in target.parents or target in folder.parents:
        how = "is" if target == folder else "lies inside" if folder in target.parents else "holds"
        raise ConfigError(f"the output folder {out} {how} the {what} {other}; choose a {option} "
                          f"outside it")


# ---- staging and commit ----------------------------------------------------------------------
def staging_dir(final: str | os.PathLike, within: str | os.PathLike | None = None) -> Path:
    """A new empty folder for the files of ``final``, in ``within`` (default: beside ``final``).

    ``within`` must be on the file system of ``final`` (the commit is a rename): an output folder
    that holds ``final`` a level or more down, so that a staging folder a killed run leaves behind
    is not listed among ``final``'s siblings. Its name starts with :data:`STAGING_PREFIX` and is
    unique to this process and call.
    """
    final = Path(final)
    parent = final.parent if within is None else Path(within)
    if final.exists() and not final.is_dir():
        raise TcqaError(f"{final} exists and is not a folder; move it away or choose another output")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TcqaError(f"cannot create {final.parent}: {exc.strerror or exc}") from exc
    if final.is_dir() and not os.access(final, os.W_OK | os.X_OK):
        raise TcqaError(f"cannot write the output folder {final}: {_unwritable(final)}")
    stage = parent / f"{STAGING_PREFIX}{_short(final.name)}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        stage.mkdir()  # never follows a link: a name that exists (a planted link too) is EEXIST
    except OSError as exc:
        raise TcqaError(f"cannot write the output folder {final}: {exc.strerror or exc} in "
                        f"{parent}, where it is staged before it is committed") from None
    return stage


def _short(name: str) -> str:
    """``name`` as part of a house file name beside it (staging, lock): short enough that the
    built name fits :data:`MAX_NAME_BYTES` (a long name keeps its start plus a digest of it)."""
    if len(name.encode("utf-8", "surrogateescape")) <= 100:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{name.encode('utf-8', 'surrogateescape')[:80].decode('utf-8', 'ignore')}-{digest}"


def _refuse_link(path: Path, what: str) -> None:
    """A TcqaError when ``path`` is a symbolic link where a plain folder of ours is expected:
    writing through it would write where the link leads, outside what we own."""
    if path.is_symlink():
        raise TcqaError(f"{path} is a symbolic link (to {os.readlink(path)}) where tcqa-data expects "
                        f"{what}; refused, nothing is followed through it: remove the link and rerun")


def make_own_dir(path: str | os.PathLike, what: str = "its own folder") -> Path:
    """Create the folder ``path`` (its parents too) or take the one there, refusing a symbolic link
    or a file at ``path`` (:func:`_refuse_link`): for the fixed-name work folders a rerun finds
    again (``next_generation_dir``), where a planted link would redirect every write."""
    path = Path(path)
    _refuse_link(path, what)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise TcqaError(f"{path} exists and is not a folder, where tcqa-data expects {what}; "
                        "move it away and rerun") from None
    _refuse_link(path, what)  # made a link between the check and the mkdir
    return path


def keep_mode(previous: Path, stage: Path) -> None:
    """Give ``stage`` the permission bits of the folder it replaces: a mode-700 output stays 700."""
    try:
        os.chmod(stage, stat.S_IMODE(os.lstat(previous).st_mode))
    except FileNotFoundError:
        pass


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the file system or kernel cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def commit_dir(stage: str | os.PathLike, final: str | os.PathLike) -> None:
    """Make the finished folder ``stage`` visible as ``final``, replacing any previous ``final``.

    With no previous folder this is one rename. Otherwise the two are exchanged in one atomic step
    where the kernel can (Linux), and the previous folder, now at the staging name, is removed;
    elsewhere the previous folder is renamed aside first, so a crash between the two renames leaves
    it whole under a ``.tcqa-retired-`` name beside the staging folder.
    """
    stage, final = Path(stage), Path(final)
    # a link at the staging name (planted beside the output) would put the link in final's place
    _refuse_link(stage, "the folder it staged")
    if not stage.is_dir():
        raise TcqaError(f"{stage} is not a folder; cannot commit it as {final}")
    if not final.exists() and not final.is_symlink():
        os.rename(stage, final)
        return
    if not final.is_dir() or final.is_symlink():
        raise TcqaError(f"{final} exists and is not a folder; move it away or choose another output")
    keep_mode(final, stage)
    if _exchange(stage, final):
        fault_point("exchanged")
        shutil.rmtree(stage, ignore_errors=True)  # the previous output, now at the staging name
        return
    retired = stage.parent / f"{_RETIRED_PREFIX}{_short(final.name)}-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(final, retired)
    os.rename(stage, final)
    shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def staged(final: str | os.PathLike, within: str | os.PathLike | None = None) -> Iterator[Path]:
    """Write a folder whole or not at all: yields a fresh staging folder (:func:`staging_dir`: beside
    ``final``, or in ``within``); on a normal exit it replaces ``final`` (:func:`commit_dir`); on any
    exception (Ctrl-C included) it is removed and ``final`` stays exactly as it was.

    Files inside are still written with :mod:`tcqa_data.io_utils` (atomic per file), so a reader
    that opens a staging folder never sees a half-written file either.
    """
    stage = staging_dir(final, within)
    try:
        yield stage
    except BaseException:
        _discard(stage)
        raise
    try:
        commit_dir(stage, final)
    except BaseException:
        _discard(stage)
        raise


# staging folders a failed run could not remove: listing a folder takes a file descriptor, and on
# EMFILE the failed work (an index's memory maps) still holds them all until its frames are freed
_UNREMOVED: list[Path] = []


def _discard(stage: Path) -> None:
    shutil.rmtree(stage, ignore_errors=True)
    if os.path.lexists(stage):
        _UNREMOVED.append(stage)


def remove_unremoved(exc: BaseException | None = None) -> None:
    """Remove the staging folders failed runs left (:func:`staged`), once what held the process's
    open files is freed: ``exc``'s tracebacks (the failed work's frames) are dropped first. For the
    CLI's error handler, after an OS error such as EMFILE."""
    if not _UNREMOVED:
        return
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__
    gc.collect()
    while _UNREMOVED:
        shutil.rmtree(_UNREMOVED.pop(), ignore_errors=True)


def next_generation_dir(final: str | os.PathLike) -> Path:
    """Where a resumable writer (``index-corpus``) assembles the next whole version of ``final``
    before :func:`commit_dir` swaps it in: beside it, under a fixed name, so a run killed before
    the commit finds it again."""
    final = Path(final)
    return final.parent / f"{STAGING_PREFIX}{_short(final.name)}.next"


def remove_stale_staging(final: str | os.PathLike, keep: Path | None = None) -> None:
    """Remove what killed writers of ``final`` left beside it (staging and retired folders), but
    ``keep``. Only under :func:`output_lock`: with the lock held, no other writer is running."""
    final = Path(final)
    own = re.compile(rf"^(?:{re.escape(STAGING_PREFIX)}|{re.escape(_RETIRED_PREFIX)})"
                     rf"{re.escape(_short(final.name))}(?:-\d+-[0-9a-f]{{8}}|\.next)$")
    try:
        names = os.listdir(final.parent)
    except OSError:
        return
    for name in names:
        p = final.parent / name
        if own.match(name):
            # a link at one of our names was not made by a writer of ours: refused, never followed
            _refuse_link(p, "a staging folder of its own")
            if p == keep:
                continue
            if name.startswith(_RETIRED_PREFIX) and not final.exists():
                continue  # a commit without the exchange died between its renames: the only copy
            shutil.rmtree(p, ignore_errors=True)


def carry_over(previous: str | os.PathLike, stage: str | os.PathLike) -> None:
    """Link into ``stage`` every entry of the ``previous`` output folder that the new run did not
    write (a PREP_DIR's ``eval/`` results, another task's folder): the commit then replaces the
    folder whole while keeping them, as writing into it in place always did. Files are hard links
    (no copy; writers replace files by rename, so the two folders never share a change)."""
    previous, stage = Path(previous), Path(stage)
    if not previous.is_dir():
        return
    for entry in sorted(previous.iterdir()):
        dst = stage / entry.name
        if dst.exists() or dst.is_symlink() or entry.name.startswith((STAGING_PREFIX, _RETIRED_PREFIX)):
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), dst)
        elif entry.is_dir():
            shutil.copytree(entry, dst, symlinks=True, copy_function=link_or_copy)
        else:
            link_or_copy(entry, dst)


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``dst`` as a hard link of ``src`` (no copy), or a copy where the file system has none."""
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links, or another device
        shutil.copy2(src, dst)


def output_target(final: str | os.PathLike, *, follow_link: bool = True) -> Path:
    """The folder a command writes for output ``final``: a link's target, since the commit swaps
    folders (``follow_link``: the user named the link as the output). A folder the command built
    itself (``PREP_DIR/eval/<model>``, ``RESULTS/analysis``: ``follow_link=False``) is never a
    link: one planted there is refused, not followed outside."""
    final = Path(final)
    if not follow_link:
        _refuse_link(final, "an output folder of its own")
        return final
    return final.resolve() if final.is_symlink() else final


# ---- who owns a folder -------------------------------------------------------------------------
# The format of each command's output folder (the marker's "format"). Commands that share a
# format may write over each other's folders.
OUTPUT_FORMATS = {
    "index-corpus": "tcqa-index/1",
    "decontaminate": "tcqa-prep-dir/1",
    "purify": "tcqa-purified-corpus/1",
    "evaluate": "tcqa-eval/1",
    "evaluate --backend lm-eval": "tcqa-lm-eval/1",
    "analyze": "tcqa-analysis/1",
}
# Outputs written before the marker existed are recognised by the file each format writes last
# (its presence means complete) or, for the resumable index, by its work folder.
_UNMARKED_FILES = {
    "tcqa-index/1": ("manifest.json", "_work"),
    "tcqa-prep-dir/1": ("prep_manifest.json",),
    "tcqa-purified-corpus/1": ("purify_report.json",),
    "tcqa-eval/1": ("results.json",),
    "tcqa-analysis/1": ("analysis.json",),
}


def _output_format(command: str) -> str:
    """The format ``command`` writes (:data:`OUTPUT_FORMATS`); a command not listed there (a
    caller's own) owns the format named after it."""
    return OUTPUT_FORMATS.get(command, command)


def write_owner(folder: str | os.PathLike, command: str) -> None:
    """Write the owner marker (:data:`OWNER_MARKER`) into the staged ``folder`` of ``command``: the
    last file before its commit. Created exclusively, never through a link."""
    body = json.dumps({"command": command, "format": _output_format(command)}, sort_keys=True) + "\n"
    path = Path(folder) / OWNER_MARKER
    try:
        os.unlink(path)  # carried over from the previous folder (a hard link): written anew
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(body)


def read_owner(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The owner marker of ``folder`` (``{"command", "format"}``), or None where it has none or it
    does not parse (a marker is never followed through a link)."""
    try:
        fd = os.open(Path(folder) / OWNER_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(4096)
    try:
        owner = json.loads(raw)
    except ValueError:
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("format"), str) else None


def _unmarked_own(folder: Path, fmt: str, names: list[str]) -> bool:
    """An output of format ``fmt`` written before markers (:data:`_UNMARKED_FILES`)."""
    if fmt == "tcqa-lm-eval/1":  # lm-eval's own layout: one folder per model of results_*.json
        return all((folder / n).is_dir() and not (folder / n).is_symlink()
                   and any(f.startswith("results_") for f in os.listdir(folder / n)) for n in names)
    return any(n in names for n in _UNMARKED_FILES.get(fmt, ()))


def ownership_problem(folder: str | os.PathLike, command: str) -> str | None:
    """Why ``command`` may not write its output into ``folder`` (a phrase), or None when it may: it
    does not exist, is empty, carries ``command``'s format in its marker, or is an unmarked output
    of that format (written before markers)."""
    folder = Path(folder)
    fmt = _output_format(command)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {os.readlink(folder)})"
    if not stat.S_ISDIR(st.st_mode):
        return "exists and is not a folder"
    names = sorted(os.listdir(folder))
    if not names:
        return None
    owner = read_owner(folder)
    if owner is not None:
        if owner["format"] == fmt:
            return None
        return f"holds the output of `{owner.get('command')}` ({owner['format']})"
    if _unmarked_own(folder, fmt, names):
        return None
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"is not empty and was not written by {command} (it holds {shown})"


def check_owned(folder: str | os.PathLike, command: str) -> None:
    """A ConfigError (one line naming what is there) unless ``command`` may replace ``folder``
    (:func:`ownership_problem`): a command never replaces a folder it did not write."""
    try:
        problem = ownership_problem(folder, command)
    except OSError as exc:
        raise TcqaError(f"cannot read the output folder {folder}: {exc.strerror or exc}") from None
    if problem is not None:
        raise ConfigError(f"the output folder {folder} {problem}; {command} writes only into a new or "
                          "empty folder or one it wrote itself, and replaces it whole: choose another")


def check_output(final: str | os.PathLike, command: str, *, follow_link: bool = True) -> Path:
    """Every check of output ``final`` that needs no lock (a link, a file, a folder that cannot be
    written, someone else's folder), before any work; returns the folder to write
    (:func:`output_target`)."""
    final = output_target(final, follow_link=follow_link)
    check_output_dir(final)
    check_owned(final, command)
    return final


@contextmanager
def claimed_output(final: str | os.PathLike, command: str, *, follow_link: bool = True) -> Iterator[Path]:
    """Check ``final`` and hold its lock for the block, before a long computation whose result
    :func:`staged_output` (``locked=True``) commits there: a second writer is refused at once, not
    after the first one's work. Yields the folder to pass on. ``follow_link``: as
    :func:`output_target`."""
    final = check_output(final, command, follow_link=follow_link)
    with output_lock(final, command):
        check_owned(final, command)  # as it is now that no other writer runs
        yield final


@contextmanager
def staged_output(final: str | os.PathLike, command: str, *, locked: bool = False,
                  follow_link: bool = True, carry: bool = True) -> Iterator[Path]:
    """A whole output folder, one writer at a time: the lock of ``final`` (:func:`output_lock`),
    leftovers of killed writers removed, a fresh staging folder to write into; on a normal exit
    the entries of the previous ``final`` that the block did not write are carried over
    (:func:`carry_over`; not with ``carry=False``: the folder is replaced whole), the owner marker
    is written (:func:`write_owner`), and the staging folder replaces ``final`` in one step
    (:func:`commit_dir`). On any exception or a kill, ``final`` stays exactly as it was. Refused at
    once: a folder ``command`` does not own (:func:`check_owned`). ``locked``: the caller already
    holds the lock (:func:`claimed_output`, taken before long work). ``follow_link``: as
    :func:`output_target`."""
    final = check_output(final, command, follow_link=follow_link)
    with nullcontext() if locked else output_lock(final, command):
        check_owned(final, command)
        remove_stale_staging(final)
        with staged(final) as stage:
            yield stage
            if carry:
                carry_over(final, stage)
            write_owner(stage, command)
            fault_point("output-commit")


def writes_output(arg: str, command: str, result_key: str = "out_dir", *, carry: bool = True
                  ) -> Callable[[F], F]:
    """Decorate a stage function whose argument ``arg`` names its output folder: it runs with a
    staging folder in its place, inside :func:`staged_output` (``carry``: as there), so its folder
    is committed whole or not at all; ``result[result_key]`` (the returned summary's folder) names
    the final folder."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            final = Path(bound.arguments[arg])
            with staged_output(final, command, carry=carry) as stage:
                bound.arguments[arg] = stage
                result = fn(*bound.args, **bound.kwargs)
            if isinstance(result, dict) and result_key in result:
                result[result_key] = str(final)
            return result

        return run  # type: ignore[return-value]

    return wrap


# ---- OS errors ----------------------------------------------------------------------------------
# A full disk or quota: the work areas a resumable writer keeps for its rerun are removed too,
# since keeping them keeps the disk full.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# Errors of the disk a command writes, whichever file the failing call names (a copy names its
# source and its destination): one line from os_error_line.
OUTPUT_ERRNOS = (*_NO_SPACE, errno.EROFS, errno.EMFILE, errno.ENFILE, errno.ENAMETOOLONG)


def os_error_in(exc: BaseException) -> OSError | None:
    """The OSError that ``exc`` is or was raised from (a worker's error the engine translated into a
    TcqaError keeps it as its cause), or None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError) and cur.errno is not None:
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def os_error_line(exc: OSError) -> str:
    """One line for an OSError: the path, the reason, and that the previous output is unchanged
    (every output is staged and committed whole)."""
    where = " -> ".join(os.fsdecode(f) for f in (exc.filename, exc.filename2) if f is not None)
    reason = exc.strerror or str(exc)
    hint = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space",
            errno.EMFILE: "raise the open-file limit (ulimit -n)",
            errno.ENAMETOOLONG: "choose a shorter output path"}.get(exc.errno or 0, "")
    where = ascii(where)[1:-1] if any("\udc80" <= c <= "\udcff" for c in where) else where
    return (f"{where + ': ' if where else ''}{reason}; the previous output is unchanged"
            f"{'; ' + hint + ' and rerun' if hint else ''}")


@contextmanager
def removed_on_full_disk(*work_areas: str | os.PathLike) -> Iterator[None]:
    """Around a resumable writer's work: when it fails for want of space (ENOSPC, EDQUOT, also as
    the cause of a worker's error), its ``work_areas`` are removed (a kill keeps them to resume)."""
    try:
        yield
    except BaseException as exc:
        found = os_error_in(exc)
        if found is not None and found.errno in _NO_SPACE:
            for area in work_areas:
                area = Path(area)
                if area.is_symlink():
                    continue  # never followed (refused where it is made)
                shutil.rmtree(area, ignore_errors=True)
        raise


FAULT_ENV = "TCQA_FAULT_AT"


def fault_point(name: str) -> None:
    """A named point of a commit where the fault-injection tests kill this process (SIGKILL, as a
    crash or ``kill -9`` would) when ``TCQA_FAULT_AT`` names it; nothing otherwise."""
    if name in os.environ.get(FAULT_ENV, "").split(","):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


# ---- one writer at a time --------------------------------------------------------------------
def lock_path(final: str | os.PathLike) -> Path:
    """The lock file of output ``final``: beside it, not in it, because a commit swaps the folder
    (a lock inside would be swapped away with the old folder)."""
    final = Path(final)
    return final.parent / f".{_short(final.name)}.tcqa-lock"


@contextmanager
def output_lock(final: str | os.PathLike, command: str) -> Iterator[None]:
    """Hold the advisory lock of output ``final`` (``fcntl.flock``) while the block writes it.

    A second writer is refused at once with a TcqaError naming the holder's pid; the lock goes
    with the process (a killed writer holds nothing). Readers take no lock: what they read is
    only ever a committed folder. The holder removes the lock file when it is done, so a run
    leaves nothing beside its output (a killed one leaves the file, which the next run takes and
    removes); a writer that opened the file just before its holder removed it sees another file at
    the path, or none, and opens the path again.
    """
    final = Path(final)
    path = lock_path(final)
    # folders made here for the lock file, removed again if the run leaves them empty (refused)
    created = [p for p in (final.parent, *final.parent.parents) if not p.exists()]
    while True:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a link planted at the lock's name (dangling or not) is refused, ELOOP
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                _refuse_link(path, "its lock file")
            raise TcqaError(f"cannot write beside {final} (the lock file {path}): "
                            f"{exc.strerror or exc}") from None
        problem = _foreign_lock(fd)
        if problem:
            os.close(fd)
            raise TcqaError(f"{path} {problem}, where tcqa-data keeps the lock of {final}; refused "
                            "(it would be overwritten): move it away and rerun")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise TcqaError(f"{final} is being written by another tcqa-data process (pid {holder}, "
                            f"lock {path}); wait for it to finish or stop it, then run {command} "
                            "again") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed this file after we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)  # while still held: a waiting writer then finds no file, or a new one
        except FileNotFoundError:
            pass
        os.close(fd)  # releases the lock
        for folder in created:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break  # not empty: the output (or another writer's) is there


def _foreign_lock(fd: int) -> str | None:
    """Why the file open at ``fd`` is not a lock file of ours (a phrase), or None: a lock file is a
    regular file of one link holding at most a pid line. Anything else at the lock's name is
    someone's file (a hard link to it too), which the lock would truncate and remove."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"is a file with {st.st_nlink} hard links"
    if st.st_size > 32 or not re.fullmatch(rb"\d*\n?", os.pread(fd, 33, 0)):
        return "is a file that holds other data than a lock's pid"
    return None


# ---- code files a folder ships ---------------------------------------------------------------
CODE_SUFFIXES = (".py", ".yaml", ".yml")


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (the index's inputs, a PREP_DIR's exported code)."""
    h = hashlib.sha256()
    # one buffer read into again and again: a fresh 4 MB bytes object per read costs page faults
    # (about half the CPU time of hashing the file)
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def code_digests(folder: str | os.PathLike) -> dict[str, str]:
    """sha256 of every code file under ``folder`` (Python, and YAML whose templates lm-eval renders),
    keyed by its path relative to ``folder`` in POSIX form; ``__pycache__`` is left out."""
    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.relative_to(folder).parts:
            out[p.relative_to(folder).as_posix()] = file_sha256(p)
    return out


def code_changes(folder: str | os.PathLike, recorded: dict[str, str]) -> list[str]:
    """How the code files under ``folder`` differ from ``recorded`` (:func:`code_digests`): one
    phrase per file, naming it; empty when they match."""
    now = code_digests(folder)
    out = []
    for name in sorted(recorded.keys() | now.keys()):
        if name not in now:
            out.append(f"{name} is missing")
        elif name not in recorded:
            out.append(f"{name} was added")
        elif now[name] != recorded[name]:
            out.append(f"{name} was modified")
    return out
