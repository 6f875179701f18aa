"""The user's text as CSV tables and YAML documents, bounded and checked. Pure: text in, data out (reading
the files is :mod:`placement.files.readers`).

The low-level readers every command shares (``plan``, ``plan-batch``, ``submit``, ``dispatch``): they know
nothing of catalogs or quotas (:mod:`placement.files.inputs` builds those from them). With :mod:`placement.errors`
and :mod:`placement.model.numbers` the bottom floor of ``placement``: only the standard library is imported at module
level so ``placement --help`` stays fast; YAML loads on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from placement.errors import InputError, UsageError, shown

# Bounds on a user's file, checked before it is parsed: a few hundred bytes of YAML can otherwise expand to
# gigabytes (aliases) or crash the C loader (nesting), and a wrong path can name a huge file.
MAX_YAML_BYTES = 16 * 2**20  # job, batch, quota, reservation and stack-output files
MAX_CSV_BYTES = 512 * 2**20  # catalogs: a full SkyPilot vms.csv is tens of MB
MAX_YAML_DEPTH = 64  # nested collections; job specs use 4
MAX_YAML_NODES = 1_000_000  # values after expanding aliases (a shared mapping is counted each time it is used)
YAML_SUFFIXES = (".yaml", ".yml")


def is_yaml_path(path: str) -> bool:
    """True for a file named ``*.yaml`` / ``*.yml`` in any case (``Q.YAML`` from a case-insensitive system)."""
    return path.lower().endswith(YAML_SUFFIXES)


# ----------------------------------------------------------------------------- CSV


def csv_rows(text: str, source: str, required: Sequence[str],
             hint: str = "") -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header and the rows of a user's CSV as ``(line, cells)``, checked: every ``required`` column once,
    no column twice, no row with more cells than the header (a shorter row is padded with blanks), no cell over
    several lines (an unterminated quote), and malformed CSV (a cell over the csv module's size limit) as an
    :class:`~placement.errors.InputError` naming the line. Blank lines are skipped; a leading byte-order mark
    (spreadsheet exports) is ignored. ``line`` is the row's line in the file."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        header = next(reader, [])
    except csv.Error as exc:
        raise InputError("header", f"is not valid CSV ({exc})", source=source) from None
    if reader.line_num > 1:  # the header's quote ran on through the lines below it
        raise InputError("header", "a quote opened on line 1 is never closed; close the quote", source=source)
    dup = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if dup is not None:
        raise InputError(shown(dup), "column appears twice in the header; keep one", source=source)
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(missing[0], "column is missing; the header must have " + ",".join(required) + hint,
                         source=source)
    width = len(header)

    def rows() -> Iterator[tuple[int, list[str]]]:
        last = reader.line_num
        held: tuple[int, list[str]] | None = None  # one row behind: the last row is checked for a quote left open
        try:
            for row in reader:
                line, first = reader.line_num, last + 1
                if line > first:  # a cell holds a line break: in these tables, a quote left open
                    raise InputError(f"line {first}", f"a quoted cell runs on to line {line}: a quote is not "
                                     "closed (or a cell spans lines); close the quote", source=source)
                last = line
                if len(row) != width:
                    if not row:
                        continue  # a blank line
                    if len(row) > width:
                        raise InputError(f"line {line}", f"has more cells than the header's {width}", source=source)
                    row += [""] * (width - len(row))
                if held is not None:
                    yield held
                held = (line, row)
        except csv.Error as exc:
            raise InputError(f"line {last + 1}", f"is not valid CSV ({str(exc)[:80]})",
                             source=source) from None
        if held is not None:
            # A quote opened on the last line runs to the end of the file without a line to run on to: the csv
            # module ends the cell there, so the row reads as one with fewer cells (its GPU cells blank).
            if _quote_left_open(text):
                raise InputError(f"line {held[0]}", "a quote opened on this line is never closed; close the quote",
                                 source=source)
            yield held

    return header, rows()


def _quote_left_open(text: str) -> bool:
    """Whether the last non-blank line of ``text`` opens a quote it never closes: an odd number of quote
    characters, and the line refused as strict CSV (a quote inside an unquoted cell, ``5" disk``, is not)."""
    import csv

    body = text.rstrip("\r\n")
    tail = body[body.rfind("\n") + 1:]
    if tail.count('"') % 2 == 0:
        return False
    try:
        list(csv.reader([tail], strict=True))
    except csv.Error:
        return True
    return False


def csv_table(text: str, source: str, required: Sequence[str],
              hint: str = "") -> tuple[list[str], Iterator[dict[str, Any]]]:
    """:func:`csv_rows` as one mapping of column to cell per row (quota and reservation files)."""
    header, rows = csv_rows(text, source, required, hint)
    return header, (dict(zip(header, row, strict=True)) for _, row in rows)


# ----------------------------------------------------------------------------- YAML


def _prescan(text: str, label: str) -> None:
    """Refuse nesting deeper than :data:`MAX_YAML_DEPTH` from the token stream (the scanner keeps no
    recursion; the composer that would crash on deep nesting is not run yet)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    opens = (yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken, yaml.FlowSequenceStartToken,
             yaml.FlowMappingStartToken)
    closes = (yaml.BlockEndToken, yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
    depth = 0
    try:
        while loader.check_token():
            token = loader.get_token()
            if isinstance(token, opens):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise UsageError(f"{label}: nested more than {MAX_YAML_DEPTH} levels deep at line "
                                     f"{token.start_mark.line + 1}; flatten it")
            elif isinstance(token, closes):
                depth -= 1
    finally:
        loader.dispose()


def _expanded_size(root: Any, label: str) -> int:
    """Nodes of the document with every alias expanded, without expanding it (each node counted once, then
    reused), refusing more than :data:`MAX_YAML_NODES` (an alias bomb) and an alias to its own ancestor."""
    import yaml

    def children(node: Any) -> list[Any]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            open_.discard(nid)
            size[nid] = 1 + sum(size[id(c)] for c in children(node))
            if size[nid] > MAX_YAML_NODES:
                raise UsageError(f"{label}: expands to more than {MAX_YAML_NODES:,} values (YAML aliases, line "
                                 f"{node.start_mark.line + 1}); write a smaller file")
            continue
        if nid in size:
            continue
        if nid in open_:
            raise UsageError(f"{label}: an alias at line {node.start_mark.line + 1} refers to a value that contains "
                             "it; write the value out")
        open_.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in size)
    return size[id(root)]


def _strict_loader(label: str) -> type:
    """The YAML loader for users' files: safe (C when available) and refusing a key given twice."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<: *base" then an explicit key overrides a merged one, by design
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise UsageError(f"{label}: key {shown(key, 40)} is given twice (lines {seen[key]} and "
                                         f"{line}); keep one")
                    seen[key] = line
                except TypeError:
                    continue  # an unhashable key: the base class says so
            return super().construct_mapping(node, deep)

    return StrictLoader


def _yaml_problem(exc: Any, text: str, label: str) -> str:
    """The one-line message for the YAML syntax error ``exc``: a tab and an unterminated quote by name (the
    loaders' own words are "cannot start any token" and "unexpected end of stream"), else their words."""
    mark = getattr(exc, "problem_mark", None)
    context, problem = getattr(exc, "context", None), getattr(exc, "problem", None)
    if mark is not None:
        lines = text.split("\n")
        char = lines[mark.line][mark.column:mark.column + 1] if mark.line < len(lines) else ""
        if char == "\t" or (isinstance(problem, str) and ("'\\t'" in problem or "tab character" in problem)):
            return (f"{label}: line {mark.line + 1} column {mark.column + 1} has a tab character; YAML indents "
                    "with spaces: replace the tab with spaces")
    start = getattr(exc, "context_mark", None)
    if (isinstance(context, str) and "quoted scalar" in context and isinstance(problem, str)
            and "end of stream" in problem and start is not None):
        return (f"{label}: the quote opened at line {start.line + 1} column {start.column + 1} is never closed; "
                "add the closing quote")
    where = f" at line {mark.line + 1}" if mark is not None else ""
    detail = f" ({shown(problem, 80)[1:-1]})" if isinstance(problem, str) else ""
    return f"{label} is not valid YAML{where}{detail}; fix the syntax"


def parse_yaml(text: str, label: str) -> Any:
    """YAML text from a user (a file, a kubeconfig in stack outputs); ``label`` starts every error.

    Bounded before it is built: at most :data:`MAX_YAML_DEPTH` levels of nesting (the C loader overflows
    its stack on deep nesting, checked before composing), at most :data:`MAX_YAML_NODES` values with aliases
    expanded (a few hundred bytes of aliases would otherwise expand to gigabytes); a key given twice in a
    mapping is refused. Errors are :class:`~placement.errors.UsageError`.
    """
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise UsageError(f"{label}: larger than {MAX_YAML_BYTES // 2**20} MiB")
    try:
        _prescan(text, label)
        loader = _strict_loader(label)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, label)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise UsageError(_yaml_problem(exc, text, label)) from None
    except RecursionError:
        raise UsageError(f"{label}: nested too deeply; flatten it") from None
