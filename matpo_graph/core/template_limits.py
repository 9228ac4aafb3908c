"""A Jinja sandbox that bounds work, not only attribute access: time, output and value sizes.

Jinja's sandbox stops templates from reaching Python internals, but not from asking for a lot of
work: ``{{ 9 ** 9 ** 9 }}``, ``{{ "x" * 10 ** 9 }}``, ``{{ "x"|center(10 ** 9) }}``, a macro that
doubles a string at each recursion, nested loops over large ranges. Graphs may come from strangers,
so :class:`BoundedSandbox`:

- intercepts the arithmetic operators and refuses results larger than :data:`MAX_VALUE_CHARS`
  characters or items, or integers wider than :data:`MAX_INT_BITS` bits, *before* computing them;
- checks the size a join, concatenation (``~``), replace, padding, ``%``/``format`` or wrap would
  produce before doing it, for filters and for string methods alike; numeric arguments of filters
  are capped at :data:`MAX_FILTER_INT`;
- caps captured blocks and macro output (their buffers, as pieces arrive) and the rendered text at
  :data:`MAX_OUTPUT_CHARS`;
- is immutable (templates cannot change lists or dicts they are given) and compiles without
  constant folding, so nothing is evaluated while a template is checked or compiled;
- runs every compile and render under a wall-clock deadline (:data:`RENDER_SECONDS`), checked on
  each line of template code and each Python call made while rendering (a trace function,
  installed only for the duration of the call and only in the calling thread).

Every refusal raises :class:`TemplateLimitError` (a ``SecurityError``).
"""

from __future__ import annotations

import re
import string
import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, TypeVar

import jinja2
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = [
    "MAX_FILTER_INT",
    "MAX_INT_BITS",
    "MAX_OUTPUT_CHARS",
    "MAX_RANGE",
    "MAX_TOTAL_CHARS",
    "MAX_TEMPLATE_CHARS",
    "MAX_VALUE_CHARS",
    "RENDER_SECONDS",
    "BoundedSandbox",
    "TemplateLimitError",
    "within_deadline",
]

MAX_TEMPLATE_CHARS = 200_000
"""Longest template source (includes inlined)."""
MAX_VALUE_CHARS = 1_000_000
"""Largest string (characters) or sequence (items) an operation may produce."""
MAX_OUTPUT_CHARS = 1_000_000
"""Longest rendered text (and captured block or macro output)."""
MAX_INT_BITS = 4096
"""Widest integer an operation may produce."""
MAX_FILTER_INT = 10_000
"""Largest number a filter or padding method accepts as an argument (widths, counts, indents)."""
MAX_RANGE = 100_000
"""Most items of range()."""
MAX_TOTAL_CHARS = 20_000_000
"""Most characters (or items) all the checked operations of one render may produce together."""
RENDER_SECONDS = 2.0
"""Wall-clock limit of one compile or render."""

T = TypeVar("T")
_TEMPLATE_FILE = "<template>"


class TemplateLimitError(SecurityError):
    """A template asked for more work or memory than the limits allow."""


def _too_big(what: str, size: int, limit: int) -> TemplateLimitError:
    return TemplateLimitError(f"template limit: {what} would be {size} long, more than {limit}")


def _measure(value: Any) -> int:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return 0


_BUDGET = threading.local()


def _charge(size: int) -> None:
    """Count what one render (or compile) has produced so far; values kept in lists or namespaces
    across a loop are each within MAX_VALUE_CHARS, but together they must stay within MAX_TOTAL_CHARS."""
    used = getattr(_BUDGET, "used", None)
    if used is None:  # outside within_deadline (e.g. a direct call in a test): nothing to count against
        return
    used += size
    _BUDGET.used = used
    if used > MAX_TOTAL_CHARS:
        raise _too_big("everything this template computed", used, MAX_TOTAL_CHARS)


def _check(value: T) -> T:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise _too_big("an integer (bits)", value.bit_length(), MAX_INT_BITS)
        return value
    size = _measure(value)
    if size > MAX_VALUE_CHARS:
        raise _too_big("a value", size, MAX_VALUE_CHARS)
    _charge(size)
    return value


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_NUMBER = re.compile(r"\d+")


def _check_percent_format(fmt: str) -> None:
    for m in _PERCENT_SPEC.finditer(fmt):
        for group in m.groups():
            if group == "*":
                raise TemplateLimitError("template limit: '*' widths in %-formatting are not allowed")
            if group is not None and int(group) > MAX_FILTER_INT:
                raise _too_big("a %-format width", int(group), MAX_FILTER_INT)


def _check_brace_format(fmt: str, depth: int = 0) -> None:
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _, _, spec, _ in parsed:
        if spec:
            for number in _NUMBER.findall(spec):
                if len(number) > 6 or int(number) > MAX_FILTER_INT:
                    raise _too_big("a format width", int(number[:7]), MAX_FILTER_INT)
            if depth < 2:
                _check_brace_format(spec, depth + 1)


def _check_binop(op: str, left: Any, right: Any) -> None:
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "**" and ints and right > 0:
        bits = max(left.bit_length(), 1) * right
        if abs(left) > 1 and bits > MAX_INT_BITS:
            raise _too_big("a power (bits)", bits, MAX_INT_BITS)
    elif op == "*":
        if ints:
            bits = left.bit_length() + right.bit_length()
            if bits > MAX_INT_BITS:
                raise _too_big("a product (bits)", bits, MAX_INT_BITS)
        elif isinstance(left, int) or isinstance(right, int):
            seq, n = (right, left) if isinstance(left, int) else (left, right)
            size = _measure(seq) * max(int(n), 0)
            if size > MAX_VALUE_CHARS:
                raise _too_big("a repetition", size, MAX_VALUE_CHARS)
    elif op == "+" and not ints:
        size = _measure(left) + _measure(right)
        if size > MAX_VALUE_CHARS:
            raise _too_big("a sum", size, MAX_VALUE_CHARS)
    elif op == "%" and isinstance(left, str):
        _check_percent_format(left)


def _join_size(items: list[Any], sep: str) -> int:
    return sum(len(x) if isinstance(x, str) else 8 for x in items) + len(sep) * max(len(items) - 1, 0)


def _check_replace(s: str, old: str, new: str, count: Any = -1) -> None:
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    size = len(s) + hits * max(len(new) - len(old), 0)
    if size > MAX_VALUE_CHARS:
        raise _too_big("a replacement", size, MAX_VALUE_CHARS)


def _check_wrap(s: Any, width: Any, wrapstring: Any) -> None:
    if isinstance(s, str) and isinstance(wrapstring, str) and isinstance(width, int):
        lines = len(s) // max(width, 1) + s.count("\n") + 1
        size = len(s) + lines * len(wrapstring)
        if size > MAX_VALUE_CHARS:
            raise _too_big("wrapped text", size, MAX_VALUE_CHARS)


def _check_indent(s: Any, width: Any) -> None:
    if isinstance(s, str):
        per_line = len(width) if isinstance(width, str) else (width if isinstance(width, int) else 0)
        size = len(s) + (s.count("\n") + 1) * per_line
        if size > MAX_VALUE_CHARS:
            raise _too_big("indented text", size, MAX_VALUE_CHARS)


def _check_int_args(name: str, args: Iterable[Any]) -> None:
    for value in args:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FILTER_INT:
            raise TemplateLimitError(f"template limit: {name}() got the number {value}, more than {MAX_FILTER_INT}")


def _materialise(value: Any) -> Any:
    if isinstance(value, (str, list, tuple, dict, set, frozenset)):
        return value
    if isinstance(value, Iterable):
        items = []
        for item in value:
            items.append(item)
            if len(items) > MAX_VALUE_CHARS:
                raise _too_big("a sequence", len(items), MAX_VALUE_CHARS)
        return items
    return value


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter with the size checks above; the jinja pass_arg marker is kept by `wraps`."""
    passes = getattr(fn, "jinja_pass_arg", None)

    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        lead = 1 if passes is not None else 0  # context / eval_context / environment first
        args = list(args)
        if len(args) > lead:
            if name in ("join", "replace", "wordwrap", "indent", "center", "format"):
                args[lead] = _materialise(args[lead]) if name == "join" else args[lead]
            value, rest = args[lead], args[lead + 1 :]
            if name != "format":
                _check_int_args(name, [*rest, *kwargs.values()])
            if name == "join":
                sep = rest[0] if rest else kwargs.get("d", "")
                size = _join_size(list(value), sep if isinstance(sep, str) else "")
                if size > MAX_VALUE_CHARS:
                    raise _too_big("a join", size, MAX_VALUE_CHARS)
            elif name == "replace" and isinstance(value, str) and len(rest) >= 2:
                _check_replace(value, str(rest[0]), str(rest[1]), rest[2] if len(rest) > 2 else kwargs.get("count", -1))
            elif name == "wordwrap":
                width = rest[0] if rest else kwargs.get("width", 79)
                wrapstring = rest[2] if len(rest) > 2 else kwargs.get("wrapstring")
                _check_wrap(value, width, wrapstring if wrapstring is not None else "\n")
            elif name == "indent":
                _check_indent(value, rest[0] if rest else kwargs.get("width", 4))
            elif name == "format" and isinstance(value, str):
                _check_percent_format(value)
        return _check(fn(*args, **kwargs))

    return guarded


_PADDING_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}


def _check_method_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Size checks for str methods that can amplify; returns the arguments (a join's items listed)."""
    inner = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format / format_map
    owner = getattr(inner, "__self__", None)
    name = getattr(inner, "__name__", "")
    if not isinstance(owner, str):
        return args
    if name in _PADDING_METHODS:
        _check_int_args(f"str.{name}", [*args, *kwargs.values()])
    elif name == "join" and args:
        items = _materialise(args[0])
        size = _join_size(list(items), owner)
        if size > MAX_VALUE_CHARS:
            raise _too_big("a join", size, MAX_VALUE_CHARS)
        args = (items, *args[1:])
    elif name == "replace" and len(args) >= 2:
        _check_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else kwargs.get("count", -1))
    elif name in ("format", "format_map"):
        _check_brace_format(owner)
    return args


class _BoundedBuffer(list[Any]):
    """The output buffer of a captured block, macro or call block: refuses more than MAX_OUTPUT_CHARS
    as pieces arrive (a loop inside a block would otherwise pile up pieces until the deadline)."""

    _size = 0

    def append(self, piece: Any) -> None:
        self._size += len(piece) if isinstance(piece, str) else 0
        if self._size > MAX_OUTPUT_CHARS:
            raise _too_big("captured template output", self._size, MAX_OUTPUT_CHARS)
        super().append(piece)

    def extend(self, pieces: Iterable[Any]) -> None:
        for piece in pieces:
            self.append(piece)


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` into a size-checked join, slices into checked getitem calls, and block
    buffers into size-checked lists."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        """Jinja compiles `x[a:b]` to a bare subscript; route slices through the (checking) getitem too."""
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for i, part in enumerate((node.arg.start, node.arg.stop, node.arg.step)):
            self.write(", " if i else "")
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
        self.write("))")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_str_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _bounded_range(*args: int) -> range:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise _too_big("a range", len(rng), MAX_RANGE)
    return rng


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the work bounds described in the module docstring."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("optimized", False)
        super().__init__(**kwargs)
        self.filters = {name: _guard_filter(name, fn) for name, fn in self.filters.items()}
        self.globals.pop("lipsum", None)  # generates text of a caller-chosen size
        self.globals["range"] = _bounded_range

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return _check(self.binop_table[operator](left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's signature)
        args = _check_method_call(__obj, args, kwargs)
        return _check(super().call(__context, __obj, *args, **kwargs))

    @staticmethod
    def bounded_buffer() -> list[Any]:
        """A fresh output buffer for a block or macro (see _BoundedBuffer)."""
        return _BoundedBuffer()

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        return _check(value) if isinstance(argument, slice) else value  # a slice is a new value

    def bounded_str_join(self, parts: Iterable[Any]) -> str:
        """`a ~ b ~ c`: refused when the result would exceed MAX_VALUE_CHARS."""
        texts = [str(p) for p in parts]
        size = sum(map(len, texts))
        if size > MAX_VALUE_CHARS:
            raise _too_big("a concatenation", size, MAX_VALUE_CHARS)
        _charge(size)
        return "".join(texts)

    def concat(self, pieces: Iterable[str]) -> str:  # type: ignore[override]
        """Joins captured blocks and macro output, refusing more than MAX_OUTPUT_CHARS."""
        out: list[str] = []
        size = 0
        for piece in pieces:
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise _too_big("template output", size, MAX_OUTPUT_CHARS)
            out.append(piece)
        return "".join(out)


def within_deadline(fn: Callable[[], T], seconds: float = RENDER_SECONDS) -> T:
    """Run `fn` in this thread, raising TemplateLimitError once `seconds` have passed.

    The deadline is checked on every Python call and on every line of compiled template code, so a
    loop in a template stops; a single C-level operation is bounded by the size checks instead.
    Deep recursion (a macro calling itself) comes back as TemplateLimitError too.
    """
    deadline = time.monotonic() + seconds
    clock = time.monotonic

    def expired() -> TemplateLimitError:
        return TemplateLimitError(f"template limit: rendering took longer than {seconds:g}s")

    def local(frame: Any, event: str, arg: Any) -> Any:
        if clock() > deadline:
            raise expired()
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if clock() > deadline:
            raise expired()
        return local if frame.f_code.co_filename == _TEMPLATE_FILE else None

    previous = sys.gettrace()
    outer_budget = getattr(_BUDGET, "used", None)
    _BUDGET.used = 0 if outer_budget is None else outer_budget
    sys.settrace(tracer)
    try:
        return fn()
    except RecursionError:
        raise TemplateLimitError("template limit: nested too deeply (a macro or include calling itself?)") from None
    except MemoryError:
        raise TemplateLimitError("template limit: out of memory") from None
    finally:
        sys.settrace(previous)
        _BUDGET.used = outer_budget
