"""Index width: every integer expression of a kernel program against its C type.

An independent range analysis of the emitted code. The integer declarations,
loop variables (their last value too, one step past the bound) and every
subscript of a kernel program are parsed (a small C-expression parser) and
evaluated over intervals, with the runtime sizes at their planned values and
threadIdx, blockIdx, lanes over their ranges. A 32-bit subexpression (no
`long long` operand) whose interval leaves [-2^31, 2^31 - 1] ([0, 2^32 - 1] where
an operand is `unsigned`: the block index, index_width.block_type), or a value cast
to `int` or `unsigned` that does not fit, is an overflow the chosen types allow.

One relation is kept beside the intervals: a constant declared as another plus an
offset (`const int base_0 = org_0 + tc_0 * 4`: a thread's row from its block's
origin) is that offset from it, so `X - org_0` is evaluated as the offset of X from
org_0 where X is base_0 plus a term or a minimum of such (a row clamped to the last,
`min(base_0 + 1, n0 - 1) - org_0`: a shared tile's row, [0, rows) and not
[-(n0 - 1), n0 - 1] as two unrelated intervals would have it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from napkin.codegen import program as P

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
UINT_MAX = 2**32 - 1

_TOKEN = re.compile(r"\s*(?:(\d+)(LL|ll|u|U)?|([A-Za-z_][A-Za-z0-9_.]*)|(<=|>=|==|!=|&&|\|\||[-+*/%()<>?:!]))")


@dataclass(frozen=True)
class Val:
    lo: int
    hi: int
    wide: bool        # 64-bit (long long) arithmetic
    unsigned: bool = False    # 32-bit unsigned arithmetic (where not wide)

    def union(self, other: "Val") -> "Val":
        return Val(min(self.lo, other.lo), max(self.hi, other.hi), *_kind(self, other))


def _kind(a: Val, b: Val) -> tuple[bool, bool]:
    """(wide, unsigned) of a binary operation's result (C's usual conversions)."""
    wide = a.wide or b.wide
    return wide, (a.unsigned or b.unsigned) and not wide


def _fits(v: Val) -> bool:
    if v.wide:
        return True
    return 0 <= v.lo and v.hi <= UINT_MAX if v.unsigned else INT_MIN <= v.lo and v.hi <= INT_MAX


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse {text[pos:pos + 40]!r} in {text[:200]!r}")
        pos = m.end()
        if m.group(1):
            out.append(("num", int(m.group(1)), bool(m.group(2) and m.group(2) in ("LL", "ll"))))
        elif m.group(3):
            out.append(("id", m.group(3)))
        else:
            out.append(("op", m.group(4)))
    return out


class Evaluator:
    """Interval evaluation of one C expression; raises Overflow on a 32-bit overflow."""

    def __init__(self, env: dict[str, Val], where: str, problems: list):
        self.env, self.where, self.problems = env, where, problems
        self.related = env.get("#related") or {}    # name -> (origin, offset: Val)
        self.values: dict = {}                      # ast -> its Val (`offset`)

    def run(self, text: str) -> Val:
        return self.parsed(text)[0]

    def parsed(self, text: str) -> tuple:
        """(Val, ast) of the expression."""
        self.toks, self.i, self.text = _tokens(text), 0, text
        v = self.ternary()
        if self.i != len(self.toks):
            raise ValueError(f"trailing tokens in {text!r}")
        return v

    def offset(self, ast, origin: str) -> Val | None:
        """The interval of (ast - origin) by the relations (None: none applies): the origin
        itself 0, a related constant its offset, a sum or difference with a term relative to
        it, a minimum of two (one relative, the other by intervals)."""
        if ast == ("id", origin):
            return Val(0, 0, False)
        if ast[0] == "id" and self.related.get(ast[1], (None,))[0] == origin:
            return self.related[ast[1]][1]
        if ast[0] in ("+", "-"):
            left = self.offset(ast[1], origin)
            right = self.values.get(ast[2])
            if left is not None and right is not None:
                return Val(left.lo + right.lo, left.hi + right.hi, *_kind(left, right)) \
                    if ast[0] == "+" else \
                    Val(left.lo - right.hi, left.hi - right.lo, *_kind(left, right))
            return None
        if ast[0] == "min":
            sides = [self.offset(a, origin) for a in ast[1:]]
            if all(v is None for v in sides):
                return None
            o = self.env[origin]
            sides = [v if v is not None else Val(w.lo - o.hi, w.hi - o.lo, *_kind(w, o))
                     for v, w in zip(sides, (self.values[a] for a in ast[1:]))]
            return Val(min(v.lo for v in sides), min(v.hi for v in sides), *_kind(*sides))
        return None

    def _seen(self, v: tuple) -> tuple:
        self.values[v[1]] = v[0]
        return v

    # parser: each returns (Val, ast) where ast is a hashable shape used to spot min(a, b)
    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("end",)

    def take(self, op=None):
        t = self.peek()
        if op is not None and t != ("op", op):
            raise ValueError(f"expected {op!r} in {self.text!r}")
        self.i += 1
        return t

    def ternary(self):
        cond = self.logic()
        if self.peek() == ("op", "?"):
            self.take("?")
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            c = cond[1]
            if isinstance(c, tuple) and c[0] in ("<", "<=") and (c[1], c[2]) == (a[1], b[1]):
                lo, hi = min(a[0].lo, b[0].lo), min(a[0].hi, b[0].hi)   # min(x, y)
                return self._seen((Val(lo, hi, *_kind(a[0], b[0])), ("min", a[1], b[1])))
            return a[0].union(b[0]), ("?", c, a[1], b[1])
        return cond

    def logic(self):
        left = self.compare()
        while self.peek() in (("op", "&&"), ("op", "||")):
            op = self.take()[1]
            right = self.compare()
            left = (Val(0, 1, False), (op, left[1], right[1]))
        return left

    def compare(self):
        left = self.additive()
        if self.peek()[0] == "op" and self.peek()[1] in ("<", "<=", ">", ">=", "==", "!="):
            op = self.take()[1]
            right = self.additive()
            return Val(0, 1, False), (op, left[1], right[1])
        return left

    def additive(self):
        left = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            right = self.term()
            a, b = left[0], right[0]
            v = Val(a.lo + b.lo, a.hi + b.hi, *_kind(a, b)) if op == "+" else \
                Val(a.lo - b.hi, a.hi - b.lo, *_kind(a, b))
            if op == "-" and right[1][0] == "id" and right[1][1] in self.env:
                related = self.offset(left[1], right[1][1])     # (X - org_0: see above)
                if related is not None:
                    v = Val(max(v.lo, related.lo), min(v.hi, related.hi), *_kind(a, b))
            left = self._seen((self.check(v), (op, left[1], right[1])))
        return left

    def term(self):
        left = self.unary()
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "%")):
            op = self.take()[1]
            right = self.unary()
            a, b = left[0], right[0]
            wide = _kind(a, b)
            if op == "*":
                c = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
                v = Val(min(c), max(c), *wide)
            elif op == "/":
                if b.lo <= 0 <= b.hi:
                    raise ValueError(f"division by a range holding 0 in {self.text!r}")
                c = [int(x / y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
                v = Val(min(c + [0]) if a.lo <= 0 <= a.hi else min(c), max(c), *wide)
            else:
                m = max(abs(b.lo), abs(b.hi)) - 1
                v = Val(0 if a.lo >= 0 else -m, m if a.hi > 0 else 0, *wide)
                if a.lo >= 0 and a.hi <= m:
                    v = Val(a.lo, a.hi, *wide)
            left = self._seen((self.check(v), (op, left[1], right[1])))
        return left

    def unary(self):
        t = self.peek()
        if t == ("op", "-"):
            self.take()
            v, ast = self.unary()
            return self.check(Val(-v.hi, -v.lo, v.wide, v.unsigned)), ("neg", ast)
        if t == ("op", "!"):
            self.take()
            self.unary()
            return Val(0, 1, False), ("!",)
        if t == ("op", "(") and self.i + 2 < len(self.toks) and self.toks[self.i + 1][0] == "id" \
                and self.toks[self.i + 1][1] in ("int", "long", "double", "unsigned") and \
                self.toks[self.i + 2] in (("op", ")"), ("id", "long")):
            self.take("(")
            words = []
            while self.peek() != ("op", ")"):
                words.append(self.take()[1])
            self.take(")")
            v, ast = self.unary()
            kind = " ".join(words)
            if kind == "int":
                if v.lo < INT_MIN or v.hi > INT_MAX:
                    self.problems.append(f"{self.where}: (int) of [{v.lo}, {v.hi}] in "
                                         f"{self.text[:160]}")
                return Val(v.lo, v.hi, False), ast
            if kind == "unsigned":
                if v.lo < 0 or v.hi > UINT_MAX:
                    self.problems.append(f"{self.where}: (unsigned) of [{v.lo}, {v.hi}] in "
                                         f"{self.text[:160]}")
                return Val(v.lo, v.hi, False, True), ast
            return Val(v.lo, v.hi, True), ast
        return self.primary()

    def primary(self):
        t = self.take()
        if t[0] == "num":
            return self._seen((Val(t[1], t[1], t[2] or t[1] > INT_MAX), ("num", t[1])))
        if t[0] == "id":
            if t[1] not in self.env:
                raise ValueError(f"unknown variable {t[1]!r} in {self.text!r}")
            return self._seen((self.env[t[1]], ("id", t[1])))
        if t == ("op", "("):
            v = self.ternary()
            self.take(")")
            return v
        raise ValueError(f"unexpected {t} in {self.text!r}")

    def check(self, v: Val) -> Val:
        if not _fits(v):
            self.problems.append(f"{self.where}: 32-bit [{v.lo}, {v.hi}] in {self.text[:160]}")
        return v


_SUBSCRIPT = re.compile(r"\b((?:p|sm|st|res)\d+|cps)\[")


def _subscripts(text: str) -> list[str]:
    """The contents of every `name[...]` in an expression."""
    out = []
    for m in _SUBSCRIPT.finditer(text):
        depth, j = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            j += 1
        out.append(text[m.end():j - 1])
    return out


def check_kernel(k: P.KernelProgram, sizes: dict[str, int], max_grid: int = 2**31 - 1) -> list[str]:
    """Overflows of 32-bit arithmetic in kernel `k` at these runtime sizes (param -> value)."""
    env = {name: Val(v, v, True) for name, v in sizes.items()}
    env["threadIdx.x"] = Val(0, k.threads - 1, False)
    env["blockIdx.x"] = Val(0, max_grid - 1, False)
    env["gridDim.x"] = Val(1, max_grid, False)
    env["#tables"] = {}
    problems: list[str] = []
    _walk(k.body, env, problems)
    return problems


def _eval(text: str, env, where: str, problems: list, numeric: bool = True) -> Val | None:
    """Check the subscripts in `text`; when `numeric`, evaluate it (an integer expression; a
    read of an integer table, `pr0[i0][i2 / 2]`, is any value its Sets stored: `_tabled`)."""
    for sub in _subscripts(text):
        _eval(sub, env, where + " subscript", problems)
    if not numeric:
        return None
    text, env = _heads(text, env, where, problems)
    text, env = _tabled(text, env)
    return Evaluator(env, where, problems).run(text)


_HEAD = "(int)((reinterpret_cast<unsigned long long>("


def _heads(text: str, env: dict, where: str, problems: list) -> tuple[str, dict]:
    """`text` with each row's head (codegen/peeled.head_of: `(int)((reinterpret_cast<unsigned
    long long>(P) & 15) / N)`, an address's distance past 16 bytes in values) as a name bound
    to [0, 15 / N], its pointer P's offset checked as a subscript."""
    if _HEAD not in text:
        return text, env
    env = dict(env)
    while _HEAD in text:
        start = text.index(_HEAD)
        depth, j = 1, start + len(_HEAD)
        while depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        m = re.match(r" & 15\) / (\d+)\)", text[j:])
        if not m:
            raise ValueError(f"cannot parse a row's head in {text[:200]!r}")
        _eval(_as_subscripts(text[start + len(_HEAD):j - 1]), env, where + " head", problems,
              numeric=False)
        name = f"head__{len([k for k in env if k.startswith('head__')])}"
        env[name] = Val(0, 15 // int(m.group(1)), False)
        text = text[:start] + name + text[j + m.end():]
    return text, env


def _tabled(text: str, env: dict) -> tuple[str, dict]:
    """`text` with each read of an integer table (a Decl of a shape and no value: a packed
    attention's lane rows, codegen/packed.py) as a name bound to the union of what its Sets
    stored (env["#tables"], shared by every scope)."""
    tables = env.get("#tables") or {}
    found = {m.group(1) for m in re.finditer(r"\b(\w+)\[", text) if tables.get(m.group(1))}
    if not found:
        return text, env
    env = dict(env)
    for name in found:
        text = re.sub(rf"\b{name}(?:\[[^\[\]]*\])+", f"{name}__table", text)
        env[f"{name}__table"] = tables[name]
    return text, env


def _walk(body, env: dict, problems: list) -> None:
    for s in body:
        if isinstance(s, P.Decl):
            words = s.ctype.split()
            integer = ("int" in words or "long" in words or "unsigned" in words) and \
                "*" not in s.ctype and not s.shape      # (not an array: fragments' data)
            if s.init is None:
                if s.shape and ("int" in words or "long" in words) and "*" not in s.ctype:
                    env["#tables"][s.name] = None       # an integer table (`_tabled`)
                continue
            if integer and _DATA.search(s.init):
                value = _data(s.init, env, s.name, problems)
            else:   # (a pointer's `pN + (offset)`: the offset checked as a subscript)
                value = _eval(s.init if integer else _as_subscripts(s.init), env, f"{s.name} = ",
                              problems, numeric=integer)
            if not integer:     # a boolean (a condition) or a float: known to an integer only
                env[s.name] = Val(0, 1, False) if "bool" in s.ctype.split() else \
                    Val(-(2**63), 2**63 - 1, True)
            if integer and value is not None:
                held = Val(value.lo, value.hi, "long" in words, "unsigned" in words)
                if not _fits(held):
                    problems.append(f"{s.ctype} {s.name} holds [{value.lo}, {value.hi}]")
                env[s.name] = held
            if integer:
                _relate(s, env, "const" in words and value is not None)
        elif isinstance(s, P.Set):
            _eval(s.target, env, "target", problems, numeric=False)
            table = re.match(r"(\w+)\[", s.target)
            if table and table.group(1) in env["#tables"]:
                try:
                    v = _eval(s.value, env, s.target, problems)
                except ValueError:      # (an expression the evaluator does not read: any)
                    v = Val(-(2**63), 2**63 - 1, True)
                old = env["#tables"][table.group(1)]
                env["#tables"][table.group(1)] = v if old is None else old.union(v)
            else:
                _eval(s.value, env, s.target, problems, numeric=False)
        elif isinstance(s, P.Store):
            _eval(s.index, env, f"store {s.ptr}", problems)
            _eval(s.value, env, f"store {s.ptr}", problems, numeric=False)
        elif isinstance(s, (P.If, P.Continue)):
            _walk(getattr(s, "body", ()), env, problems)
            _walk(getattr(s, "orelse", ()), env, problems)
        elif isinstance(s, P.Block):
            _walk(s.body, env, problems)
        elif isinstance(s, P.For):
            _for(s, env, problems)
        elif isinstance(s, P.Call):   # fragments and copies: `pN + (offset)` is a global offset
            for arg in s.args:
                _eval(_as_subscripts(arg), env, f"{s.fn} argument", problems, numeric=False)


def _relate(s: P.Decl, env: dict, const: bool) -> None:
    """Keep env["#related"] (Evaluator.offset) for the integer declared by `s`: no relation
    of or to an earlier one of its name; a constant `NAME + E` of a constant NAME is E from it
    (env["#const"]: the constants in scope)."""
    related = {k: r for k, r in (env.get("#related") or {}).items()
               if k != s.name and r[0] != s.name}
    consts = (env.get("#const") or frozenset()) - {s.name}
    if const:
        m = re.fullmatch(r"(\w+) \+ (.+)", s.init.strip())
        if m and m.group(1) in consts and not _DATA.search(s.init):
            evaluator = Evaluator(env, s.name, [])
            try:
                _, ast = evaluator.parsed(s.init)
            except ValueError:
                ast = None
            if ast is not None and ast[0] == "+" and ast[1] == ("id", m.group(1)):
                offset = evaluator.values.get(ast[2])
                if offset is not None:
                    related[s.name] = (m.group(1), offset)
        consts |= {s.name}
    env["#related"], env["#const"] = related, consts


# An integer computed from data (language 1.1: a load of an integer array, int(...), mod, a
# gathered position): any 64-bit value, except a position clamped to its axis.
_DATA = re.compile(r"\bnapkin_\w+\(|\b(?:p|sm)\d+\[")
_CLAMP = re.compile(r"napkin_clamp_index\((.*), (?:\(\(int\)\((\w+)\)\)|(\w+))\)")


def _data(text: str, env: dict, name: str, problems: list) -> Val:
    for sub in _subscripts(text):
        _eval(sub, env, f"{name} = subscript", problems)
    m = _CLAMP.fullmatch(text.strip())
    if m:               # (a CUDA-core kernel's size read as int: `((int)(nK))`)
        size = m.group(2) or m.group(3)
        n = env.get(size) or (Val(int(size), int(size), True) if size.isdigit() else None)
        if n is not None:
            return Val(0, max(0, n.hi - 1), True)
    return Val(-(2**63), 2**63 - 1, True)


def _as_subscripts(text: str) -> str:
    """`... pN + (E) ...` (pointer arithmetic on a global array) as `pN[E]`, so that the
    offset E is checked like any subscript."""
    out, i = [], 0
    for m in re.finditer(r"\b(p\d+|cps) \+ \(", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        out.append(text[i:m.start()] + f"{m.group(1)}[{text[m.end():j - 1]}]")
        i = j
    return "".join(out) + text[i:]


def _for(s: P.For, env: dict, problems: list) -> None:
    wide, unsigned = "long long" in s.ctype, "unsigned" in s.ctype.split()
    # (no start: the loop goes on from the variable's value before it, codegen/mma.py's
    # unmasked loop; a test after the bound only ends the loop sooner)
    start = _eval(s.start, env, f"{s.var} start", problems) if s.start else env.get(s.var)
    m = re.fullmatch(rf"{re.escape(s.var)} (<|>) (.+)", s.cond.split(" && ", 1)[0])
    step = re.fullmatch(rf"(?:\+\+{re.escape(s.var)}|{re.escape(s.var)} \+= (.+)|"
                        rf"{re.escape(s.var)} /= 2)", s.update)
    if start is None or m is None or step is None:
        problems.append(f"cannot analyse the loop over {s.var}: {s.cond}; {s.update}")
        return
    if m.group(1) == ">":                       # for (off = w / 2; off > 0; off /= 2)
        env[s.var] = Val(1, max(1, start.hi), wide, unsigned)
    else:
        bound = _eval(m.group(2), env, f"{s.var} bound", problems)
        inc = _eval(step.group(1), env, f"{s.var} step", problems) if step.group(1) else Val(1, 1, False)
        if bound is None or inc is None:
            return
        env[s.var] = Val(start.lo, max(start.lo, bound.hi - 1), wide, unsigned)
        last = bound.hi - 1 + inc.hi             # the value that ends the loop
        if not _fits(Val(start.lo, last, wide, unsigned)):
            problems.append(f"loop {s.var} steps to {last} past its type's largest "
                            f"({s.ctype}: {s.cond})")
    _walk(s.body, dict(env), problems)
