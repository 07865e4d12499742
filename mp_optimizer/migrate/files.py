"""One file through the codemod: found, read, filtered, converted, written.

`process` is what the command line runs for each file, in this process or in
a worker; it returns what to print instead of printing, so that the output of
parallel workers comes out in file order. libcst is imported only once a
file passes the filter.
"""

import ast
import dataclasses
import io
import os
import stat
import tempfile
import tokenize
from typing import Iterator, List, Sequence

from mp_optimizer.migrate import diffs
from mp_optimizer.migrate import mentions

_NOT_SEARCHED = ("__pycache__", "site-packages", "dist-packages")


@dataclasses.dataclass
class Result:
  """What converting one file printed and how it ended.

  Attributes:
    status: 0 nothing left to do, 1 findings, 2 not read, parsed or written.
    out: Bytes for stdout (a diff in the file's encoding, or `rewrote`).
    err: Text for stderr, one `file:line: reason` (or `file: why`) a line.
    changed: Whether the file was (or, printing a diff, would be) rewritten.
    findings: How many findings (needing a human) it has.
    notices: How many notices it has.
  """
  status: int = 0
  out: bytes = b""
  err: List[str] = dataclasses.field(default_factory=list)
  changed: bool = False
  findings: int = 0
  notices: int = 0


def _searched(root: str, directory: str) -> bool:
  """Skips hidden and cache directories, virtualenvs and installed packages."""
  return not (directory.startswith(".") or directory in _NOT_SEARCHED or
              os.path.exists(os.path.join(root, directory, "pyvenv.cfg")))


def python_files(paths: Sequence[str], errors: List[str]) -> Iterator[str]:
  """Yields the `.py` files under `paths`; appends missing paths to `errors`."""
  for path in paths:
    if os.path.isdir(path):
      for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if _searched(root, d))
        for name in sorted(files):
          if name.endswith(".py"):
            yield os.path.join(root, name)
    elif os.path.lexists(path):
      yield path
    else:
      errors.append(f"{path}: no such file or directory")


def read(path: str) -> bytes:
  """Returns the bytes of `path` if it is a regular file (or a link to one).

  Raises:
    OSError: If it cannot be read, or is a FIFO, a device or a socket (which
      could block or never end): those are never opened.
  """
  mode = os.stat(path).st_mode
  if not stat.S_ISREG(mode):
    raise OSError(f"not a regular file ({stat.filemode(mode)[0]}): skipped")
  with open(path, "rb") as f:
    return f.read()


class NotWritten(Exception):
  """A file `--in-place` must leave as it is; the message says why."""


def _write(path: str, data: bytes, original: bytes) -> None:
  """Writes `data` to `path` through a temporary file and a rename.

  The temporary file lives in the target's own folder (a rename never crosses
  file systems) and takes its owner, group and permissions; a write that
  fails leaves the original untouched. A symbolic link keeps pointing at the
  file it did. Just before the rename, the file is read again: if it no
  longer holds `original` (it was edited since), it is left as it is.

  Raises:
    NotWritten: If the file is read-only, its owner cannot be kept, or it
      changed since it was read.
    OSError: If the write fails.
  """
  target = os.path.realpath(path)
  info = os.stat(target)
  if not info.st_mode & 0o222:
    raise NotWritten(f"read-only ({stat.filemode(info.st_mode)}): not "
                     "written; make it writable to convert it")
  folder, name = os.path.split(target)
  fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp",
                                   dir=folder)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
      _keep_owner(f.fileno(), info)
    os.chmod(temporary, stat.S_IMODE(info.st_mode))
    with open(target, "rb") as f:
      if f.read() != original:
        raise NotWritten("changed since it was read: not written; run again")
    os.replace(temporary, target)
  except BaseException:
    os.unlink(temporary)
    raise


def _keep_owner(fd: int, info: os.stat_result) -> None:
  """Gives the open file `fd` the owner and group in `info`."""
  mine = os.fstat(fd)
  if (mine.st_uid, mine.st_gid) == (info.st_uid, info.st_gid):
    return
  try:
    os.fchown(fd, info.st_uid, info.st_gid)
  except PermissionError:
    raise NotWritten(f"cannot keep its owner (uid {info.st_uid}, gid "
                     f"{info.st_gid}): not written; run as its owner (or "
                     "root) to convert it") from None


def not_text(path: str) -> Result:
  """The result for a file with NUL bytes, which Python cannot read."""
  return Result(2, err=[
      f"{path}: cannot read: NUL bytes (UTF-16 or UTF-32 text?), which "
      "Python source cannot hold: save it as UTF-8, then run again"])


def _syntax_error_line(text: str, path: str, fallback: int) -> str:
  """`line: message` of Python's own SyntaxError for `text`, if it has one."""
  try:
    ast.parse(text, path)
  except SyntaxError as e:
    return f"{e.lineno or fallback}: cannot parse: {e.msg}"
  except ValueError:  # Null bytes.
    pass
  return ""


@dataclasses.dataclass(frozen=True)
class Options:
  """What to convert besides the legacy loss scaling.

  Attributes:
    horovod: Also map Horovod's TF1 imports (`--horovod`), first.
    precision: "bfloat16" also switches the code to the bfloat16 mode
      (`--precision bfloat16`, `mp_optimizer.migrate.precision`).
  """
  horovod: bool = False
  precision: str = "float16"


def wanted(data: bytes, options: Options = Options()) -> bool:
  """Whether `data` may need converting with `options` (no parsing)."""
  return (mentions.might_use_legacy(data) or
          (options.horovod and b"horovod" in data) or
          (options.precision == "bfloat16" and
           mentions.precision_words(data)))


def process(path: str, data: bytes, in_place: bool,
            options: Options = Options()) -> Result:
  """Converts one file's `data`; writes it back if `in_place`.

  Args:
    path: The file's path, for messages and for writing.
    data: Its bytes, as `read` returned them.
    in_place: Write the converted file instead of returning a diff.
    options: What to convert besides the legacy loss scaling.

  Returns:
    The `Result`.
  """
  result = Result()
  if not wanted(data, options):
    return result
  # libcst takes longer to import than most files take to filter: a run that
  # finds nothing to parse never loads it.
  import libcst as cst  # pylint: disable=import-outside-toplevel
  from mp_optimizer.migrate import codemod  # pylint: disable=import-outside-toplevel
  from mp_optimizer.migrate import horovod as horovod_imports  # pylint: disable=import-outside-toplevel
  try:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    old = data.decode(encoding)
    horovod = options.horovod and b"horovod" in data
    new, findings = horovod_imports.convert(old) if horovod else (old, [])
    legacy, (new, more) = new, codemod.convert(new)
    findings = list(findings) + list(more)
    if options.precision == "bfloat16":
      from mp_optimizer.migrate import precision as bfloat16  # pylint: disable=import-outside-toplevel
      # A file the codemod converted has had its Savers seen to.
      new, more = bfloat16.convert(new, bfloat16.original_lines(old, new),
                                   with_savers=new == legacy)
      findings += more
    findings = sorted(findings, key=lambda f: (f.line, f.reason))
  except SyntaxError as e:  # A bad encoding declaration.
    result.err.append(f"{path}:{e.lineno or 1}: cannot read: {e}")
    result.status = 2
    return result
  except UnicodeDecodeError as e:
    # `e.start` is where in `e.object`: `data`, or what follows a BOM.
    line = e.object.count(b"\n", 0, e.start) + 1
    result.err.append(f"{path}:{line}: cannot read: byte "
                      f"0x{e.object[e.start]:02x} is not valid {e.encoding} "
                      f"({e.reason})")
    result.status = 2
    return result
  except cst.ParserSyntaxError as e:
    where = (_syntax_error_line(old, path, e.editor_line) or
             f"{e.editor_line}: cannot parse: {e.message}")
    result.err.append(f"{path}:{where}")
    result.status = 2
    return result
  for finding in findings:
    note = "" if finding.needs_human else "notice: "
    result.err.append(f"{path}:{finding.line}: {note}{finding.reason}")
  result.findings = sum(f.needs_human for f in findings)
  result.notices = len(findings) - result.findings
  result.status = 1 if result.findings else 0
  if new == old:
    return result
  result.changed = True
  if in_place:
    try:
      _write(path, new.encode(encoding), data)
    except (NotWritten, OSError) as e:
      why = e if isinstance(e, NotWritten) else (
          f"cannot write: {e.strerror or e}")
      result.err.append(f"{path}: {why}")
      result.status, result.changed = 2, False
      return result
    result.out = f"rewrote {path}\n".encode()
  else:
    diff = diffs.unified(old.splitlines(keepends=True),
                         new.splitlines(keepends=True), path)
    text = "".join(line if line.endswith("\n") else
                   line + "\n\\ No newline at end of file\n" for line in diff)
    # In the file's own encoding, so that `patch` applies it to the file.
    result.out = text.encode(encoding, errors="backslashreplace")
  return result
