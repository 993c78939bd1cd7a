"""Seeded synthetic math problems with exact answers and short worked solutions.

This is the embedded stand-in for the MATH training data: every problem has one exact answer (an integer or a
fraction ``a/b`` in lowest terms), so the math-verify reward is unambiguous, and a short solution in plain
arithmetic steps (problems mostly under 80 characters, solutions under 150 at low levels), so the tiny models can
learn the answer format in a few minutes of warm-up.

Each skill is a function ``(rng, level) -> (problem, solution, answer)`` in the :data:`SKILLS` registry; level 1 is
one small step, level 5 is several steps with larger numbers. All randomness comes from the ``random.Random``
passed in (never the global generator), so the same seed gives the same problems on every platform; ``random.Random``
seeded with an int or a str (hashed with sha512, not Python's salted ``hash``) is reproducible across runs.

Record schema (shared with the hub and champ loaders)::

    {"id": str, "problem": str, "solution": str, "answer": str, "skill": str, "level": int, "source": str}

(hub and champ records may have ``skill`` or ``level`` None where the dataset has no such field.)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Sequence
from fractions import Fraction

from hara.data.io import lookup

__all__ = ["LEVELS", "RECORD_KEYS", "SKILLS", "format_number", "generate_problems", "make_record", "normalize_problem"]

LEVELS = (1, 2, 3, 4, 5)
RECORD_KEYS = ("id", "problem", "solution", "answer", "skill", "level", "source")

Problem = tuple[str, str, str]  # (problem, solution, answer)
SkillFn = Callable[[random.Random, int], Problem]


# ----------------------------------------------------------------------------------------------- formatting helpers
def format_number(value: Fraction | int) -> str:
    """Canonical answer text: ``"42"``, ``"-3"`` or ``"7/4"`` (lowest terms, sign on the numerator)."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def _paren(value: Fraction | int) -> str:
    """A number as an operand: negatives in parentheses so ``3 * (-2)`` reads unambiguously."""
    text = format_number(value)
    return f"({text})" if text.startswith("-") else text


def _linear(a: int, b: int, var: str = "x") -> str:
    """``a*x + b`` written the way people write it: ``3x - 5``, ``-x + 2``, ``x``."""
    coef = {1: "", -1: "-"}.get(a, str(a))
    head = f"{coef}{var}"
    if b == 0:
        return head
    return f"{head} {'+' if b > 0 else '-'} {abs(b)}"


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    """One phrasing template; several per skill keep the texts varied without changing the maths."""
    return options[rng.randrange(len(options))]


def _nonzero(rng: random.Random, lo: int, hi: int) -> int:
    """A uniform integer in [lo, hi] other than zero."""
    while True:
        value = rng.randint(lo, hi)
        if value:
            return value


_ASK = ("What is {e}?", "Compute {e}.", "Evaluate {e}.", "Find {e}.")


# ------------------------------------------------------------------------------------------------------------ skills
def arithmetic(rng: random.Random, level: int) -> Problem:
    """Integer arithmetic; the number of operations and the operand size grow with the level."""
    if level == 1:
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        op = _pick(rng, "+-")
        ans = a + b if op == "+" else a - b
        expr = f"{a} {op} {b}"
        return _pick(rng, _ASK).format(e=expr), f"{expr} = {ans}.", str(ans)
    if level == 2:
        a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 40)
        op = _pick(rng, "+-")
        ab = a * b
        ans = ab + c if op == "+" else ab - c
        expr = f"{a} * {b} {op} {c}"
        return _pick(rng, _ASK).format(e=expr), f"{a} * {b} = {ab}. {ab} {op} {c} = {ans}.", str(ans)
    if level == 3:
        a, b, c = rng.randint(1, 30), rng.randint(1, 30), rng.randint(2, 12)
        s, ans = a + b, (a + b) * c
        expr = f"({a} + {b}) * {c}"
        return _pick(rng, _ASK).format(e=expr), f"{a} + {b} = {s}. {s} * {c} = {ans}.", str(ans)
    if level == 4:
        a, b, c, d = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 15), rng.randint(2, 15)
        ab, cd = a * b, c * d
        ans = ab - cd
        expr = f"{a} * {b} - {c} * {d}"
        sol = f"{a} * {b} = {ab}. {c} * {d} = {cd}. {ab} - {cd} = {ans}."
        return _pick(rng, _ASK).format(e=expr), sol, str(ans)
    a, b = rng.randint(5, 40), rng.randint(1, 40)
    c, d, e = _nonzero(rng, -12, 12), rng.randint(2, 9), rng.randint(1, 60)
    diff, prod = a - b, (a - b) * c
    ans = prod + d * e
    expr = f"({a} - {b}) * {_paren(c)} + {d} * {e}"
    sol = f"{a} - {b} = {diff}. {diff} * {_paren(c)} = {prod}. {d} * {e} = {d * e}. {prod} + {d * e} = {ans}."
    return _pick(rng, _ASK).format(e=expr), sol, str(ans)


_SOLVE = ("Solve for x: {eq}.", "Find x if {eq}.", "If {eq}, what is x?")


def linear_equation(rng: random.Random, level: int) -> Problem:
    """One linear equation in x; the solution is chosen first so it is exact (a fraction only at level 5)."""
    ask = _pick(rng, _SOLVE)
    if level == 1:
        x, b = rng.randint(0, 30), rng.randint(1, 30)
        eq = f"x + {b} = {x + b}"
        return ask.format(eq=eq), f"x = {x + b} - {b} = {x}.", str(x)
    if level == 2:
        a, x = rng.randint(2, 12), rng.randint(1, 15)
        eq = f"{a}x = {a * x}"
        return ask.format(eq=eq), f"x = {a * x} / {a} = {x}.", str(x)
    if level == 3:
        a, x, b = rng.randint(2, 9), rng.randint(-10, 15), _nonzero(rng, -20, 20)
        c = a * x + b
        eq = f"{_linear(a, b)} = {c}"
        return ask.format(eq=eq), f"{a}x = {c} - {_paren(b)} = {a * x}. x = {a * x} / {a} = {x}.", str(x)
    if level == 4:
        a, c = rng.randint(2, 12), rng.randint(1, 11)
        if a == c:
            a += 1
        x, b = rng.randint(-12, 12), _nonzero(rng, -25, 25)
        d = (a - c) * x + b
        eq = f"{_linear(a, b)} = {_linear(c, d)}"
        k, r = a - c, d - b
        sol = f"{a}x - {_paren(c)}x = {d} - {_paren(b)}, so {k}x = {r}. x = {r} / {_paren(k)} = {x}."
        return ask.format(eq=eq), sol, str(x)
    # a(x + b) = cx + d with k = a - c > 0 and x = m / k, so d = m + ab is an integer and x may be a fraction
    a = rng.randint(3, 9)
    c, b, m = rng.randint(1, a - 1), _nonzero(rng, -9, 9), _nonzero(rng, -30, 30)
    k = a - c
    x, d = Fraction(m, k), m + a * b
    eq = f"{a}(x {'+' if b > 0 else '-'} {abs(b)}) = {_linear(c, d)}"
    sol = f"{_linear(a, a * b)} = {_linear(c, d)}. {_linear(k, 0)} = {d} - {_paren(a * b)} = {m}."
    if k != 1:
        sol += f" x = {format_number(x)}."
    return ask.format(eq=eq), sol, format_number(x)


def _rand_fraction(rng: random.Random, max_den: int) -> Fraction:
    """A proper positive fraction with denominator in 2..max_den (not necessarily in lowest terms when printed)."""
    den = rng.randint(2, max_den)
    return Fraction(rng.randint(1, den - 1), den)


def _sum_steps(p: Fraction, q: Fraction, op: str) -> tuple[str, Fraction]:
    """``p op q`` for op in ``+-`` over the least common denominator, with the intermediate step written out."""
    lcd = p.denominator * q.denominator // math.gcd(p.denominator, q.denominator)
    pn, qn = p.numerator * lcd // p.denominator, q.numerator * lcd // q.denominator
    ans = p + q if op == "+" else p - q
    raw = f"{pn + qn if op == '+' else pn - qn}/{lcd}"
    tail = "" if raw == format_number(ans) else f" = {format_number(ans)}"
    common = "" if p.denominator == q.denominator else f" = {pn}/{lcd} {op} {qn}/{lcd}"
    return f"{_paren(p)} {op} {_paren(q)}{common} = {raw}{tail}.", ans


def fractions(rng: random.Random, level: int) -> Problem:
    """Fraction arithmetic; answers in lowest terms ``a/b`` (or an integer when the denominator cancels)."""
    if level == 1:
        den = rng.randint(3, 12)
        a, b = rng.randint(1, den - 1), rng.randint(1, den - 1)
        raw, ans = f"{a + b}/{den}", Fraction(a + b, den)
        sol = f"{a}/{den} + {b}/{den} = {raw}" + (f" = {format_number(ans)}." if raw != format_number(ans) else ".")
        return _pick(rng, _ASK).format(e=f"{a}/{den} + {b}/{den}"), sol, format_number(ans)
    p, q = _rand_fraction(rng, 9), _rand_fraction(rng, 9)
    if level == 2 or (level == 4 and rng.random() < 0.5):
        op = "+" if level == 2 else "-"
        sol, ans = _sum_steps(p, q, op)
        return _pick(rng, _ASK).format(e=f"{_paren(p)} {op} {_paren(q)}"), sol, format_number(ans)
    if level == 3:
        raw, ans = f"{p.numerator * q.numerator}/{p.denominator * q.denominator}", p * q
        tail = "" if raw == format_number(ans) else f" = {format_number(ans)}"
        sol = f"{_paren(p)} * {_paren(q)} = {raw}{tail}."
        return _pick(rng, _ASK).format(e=f"{_paren(p)} * {_paren(q)}"), sol, format_number(ans)
    if level == 4:
        expr, ans = f"({format_number(p)}) / ({format_number(q)})", p / q
        sol = f"{format_number(p)} * {q.denominator}/{q.numerator} = {format_number(ans)}."
        return _pick(rng, _ASK).format(e=expr), sol, format_number(ans)
    r = Fraction(rng.randint(1, 9), rng.randint(2, 9))
    s, ans = format_number(p + q), format_number((p + q) * r)
    expr = f"({_paren(p)} + {_paren(q)}) * {format_number(r)}"
    sol = f"{_paren(p)} + {_paren(q)} = {s}. {s} * {format_number(r)} = {ans}."
    return _pick(rng, _ASK).format(e=expr), sol, ans


def percent(rng: random.Random, level: int) -> Problem:
    """Percentages of whole numbers, chosen so every answer is an integer."""
    if level == 1:
        p = _pick(rng, (10, 20, 25, 50))
        n = 20 * rng.randint(1, 50)
        ans = n * p // 100
        return f"What is {p}% of {n}?", f"{p}% of {n} = {n} * {p} / 100 = {ans}.", str(ans)
    if level == 2:
        p = 5 * rng.randint(1, 19)
        n = 20 * rng.randint(1, 30)
        ans = n * p // 100
        return f"What is {p}% of {n}?", f"{n} * {p} / 100 = {ans}.", str(ans)
    if level == 3:
        p, n = 5 * rng.randint(1, 12), 20 * rng.randint(1, 30)
        part = n * p // 100
        up = rng.random() < 0.5
        ans = n + part if up else n - part
        verb, op = ("Increase", "+") if up else ("Decrease", "-")
        return f"{verb} {n} by {p}%.", f"{p}% of {n} = {part}. {n} {op} {part} = {ans}.", str(ans)
    if level == 4:
        p, n = 5 * rng.randint(1, 19), 20 * rng.randint(1, 40)
        part = n * p // 100
        return f"What percent of {n} is {part}?", f"{part} / {n} * 100 = {p}.", str(p)
    n = 100 * rng.randint(1, 20)
    p, q = 10 * rng.randint(1, 5), 10 * rng.randint(1, 5)
    mid = n * (100 + p) // 100
    while mid * (100 - q) % 100:
        q = 10 * rng.randint(1, 5)
        n += 100
        mid = n * (100 + p) // 100
    ans = mid * (100 - q) // 100
    prob = f"A price of {n} rises by {p}% and then falls by {q}%. What is the new price?"
    sol = f"{n} * {100 + p}/100 = {mid}. {mid} * {100 - q}/100 = {ans}."
    return prob, sol, str(ans)


_NAMES = (
    "Ann",
    "Ben",
    "Cal",
    "Dee",
    "Eve",
    "Finn",
    "Gus",
    "Ivy",
    "Jo",
    "Kim",
    "Leo",
    "Mia",
    "Ned",
    "Pam",
    "Sam",
    "Tom",
)
_ITEMS = ("apples", "pens", "cards", "books", "coins", "shells", "stamps", "marbles", "eggs", "cups")


def word_problem(rng: random.Random, level: int) -> Problem:
    """Short stories around one to three operations (counting, sharing, shopping, distance, ages)."""
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    if level == 1:
        a, b = rng.randint(2, 40), rng.randint(1, 30)
        if rng.random() < 0.5:
            prob = f"{name} has {a} {item} and gets {b} more. How many {item} now?"
            return prob, f"{a} + {b} = {a + b}.", str(a + b)
        a += b
        prob = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
        return prob, f"{a} - {b} = {a - b}.", str(a - b)
    if level == 2:
        k, m = rng.randint(2, 12), rng.randint(2, 12)
        if rng.random() < 0.5:
            prob = f"Each box holds {k} {item}. How many {item} are in {m} boxes?"
            return prob, f"{m} * {k} = {m * k}.", str(m * k)
        prob = f"{name} shares {k * m} {item} equally among {m} friends. How many does each get?"
        return prob, f"{k * m} / {m} = {k}.", str(k)
    if level == 3:
        n, price = rng.randint(2, 9), rng.randint(2, 15)
        cost = n * price
        paid = 10 * math.ceil((cost + 1) / 10) + 10 * rng.randint(0, 4)
        prob = f"{name} buys {n} {item} at {price} dollars each and pays {paid} dollars. What is the change?"
        return prob, f"{n} * {price} = {cost}. {paid} - {cost} = {paid - cost}.", str(paid - cost)
    if level == 4:
        v1, t1, v2, t2 = rng.randint(3, 12) * 5, rng.randint(2, 6), rng.randint(3, 12) * 5, rng.randint(2, 6)
        d1, d2 = v1 * t1, v2 * t2
        prob = f"A car drives {v1} km/h for {t1} hours, then {v2} km/h for {t2} hours. How far does it go in km?"
        return prob, f"{v1} * {t1} = {d1}. {v2} * {t2} = {d2}. {d1} + {d2} = {d1 + d2}.", str(d1 + d2)
    young, k, years = rng.randint(3, 20), rng.randint(2, 5), rng.randint(2, 10)
    other = _pick(rng, [n for n in _NAMES if n != name])
    total = young + k * young + 2 * years
    prob = (
        f"{name} is {k} times as old as {other}. In {years} years the sum of their ages will be {total}. "
        f"How old is {other} now?"
    )
    sol = f"a + {k}a + {2 * years} = {total}. {k + 1}a = {total - 2 * years}. a = {young}."
    return prob, sol, str(young)


_REM = ("What is the remainder when {n} is divided by {d}?", "Find {n} mod {d}.")


def remainder(rng: random.Random, level: int) -> Problem:
    """Remainders (modular arithmetic), from one division to a power reduced mod d."""
    if level <= 2:
        n, d = (rng.randint(10, 60), rng.randint(2, 9)) if level == 1 else (rng.randint(60, 400), rng.randint(3, 15))
        q, r = divmod(n, d)
        return _pick(rng, _REM).format(n=n, d=d), f"{n} = {q} * {d} + {r}.", str(r)
    d = rng.randint(3, 13)
    if level == 3:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        s = a + b
        q, r = divmod(s, d)
        prob = f"What is the remainder when {a} + {b} is divided by {d}?"
        return prob, f"{a} + {b} = {s}. {s} = {q} * {d} + {r}.", str(r)
    if level == 4:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        p = a * b
        q, r = divmod(p, d)
        prob = f"What is the remainder when {a} * {b} is divided by {d}?"
        return prob, f"{a} * {b} = {p}. {p} = {q} * {d} + {r}.", str(r)
    base, exp = rng.randint(2, 9), rng.randint(4, 8)
    p = base**exp
    q, r = divmod(p, d)
    prob = f"What is the remainder when {base}^{exp} is divided by {d}?"
    return prob, f"{base}^{exp} = {p}. {p} = {q} * {d} + {r}.", str(r)


def powers(rng: random.Random, level: int) -> Problem:
    """Squares, cubes, roots and exponent rules."""
    if level == 1:
        a = rng.randint(2, 30)
        return _pick(rng, _ASK).format(e=f"{a}^2"), f"{a}^2 = {a} * {a} = {a * a}.", str(a * a)
    if level == 2:
        if rng.random() < 0.5:
            a = rng.randint(2, 12)
            return _pick(rng, _ASK).format(e=f"{a}^3"), f"{a}^3 = {a} * {a} * {a} = {a**3}.", str(a**3)
        a = rng.randint(2, 40)
        prob = _pick(rng, ("What is the square root of {s}?", "Find the square root of {s}."))
        return prob.format(s=a * a), f"{a} * {a} = {a * a}, so the root is {a}.", str(a)
    if level == 3:
        a, b = rng.randint(2, 15), rng.randint(2, 15)
        expr = f"{a}^2 + {b}^2"
        return _pick(rng, _ASK).format(e=expr), f"{a * a} + {b * b} = {a * a + b * b}.", str(a * a + b * b)
    if level == 4:
        base = rng.randint(2, 3)
        m, n = rng.randint(2, 5), rng.randint(2, 5)
        expr = f"{base}^{m} * {base}^{n}"
        return _pick(rng, _ASK).format(e=expr), f"{expr} = {base}^{m + n} = {base ** (m + n)}.", str(base ** (m + n))
    mid, half = rng.randint(20, 80), rng.randint(1, 15)
    a, b = mid + half, mid - half
    expr = f"{a}^2 - {b}^2"
    sol = f"{expr} = ({a} - {b})({a} + {b}) = {a - b} * {a + b} = {(a - b) * (a + b)}."
    return _pick(rng, _ASK).format(e=expr), sol, str((a - b) * (a + b))


def sequence(rng: random.Random, level: int) -> Problem:
    """Arithmetic and geometric sequences: next term, n-th term, sums."""
    a, d = rng.randint(1, 30), _nonzero(rng, -9, 12)
    if level <= 2:
        if level == 1:
            d = abs(d)
        terms = [a + i * d for i in range(4)]
        shown = ", ".join(map(str, terms))
        nxt = terms[-1] + d
        sol = f"Each step adds {_paren(d)}. {terms[-1]} + {_paren(d)} = {nxt}."
        return f"What comes next: {shown}, ?", sol, str(nxt)
    if level == 3:
        n = rng.randint(8, 30)
        shown = ", ".join(str(a + i * d) for i in range(3))
        ans = a + (n - 1) * d
        prob = f"The sequence {shown}, ... adds the same amount each time. What is term {n}?"
        return prob, f"d = {d}. {a} + {n - 1} * {_paren(d)} = {ans}.", str(ans)
    if level == 4:
        if rng.random() < 0.5:
            n = rng.randint(10, 99)
            ans = n * (n + 1) // 2
            return f"What is 1 + 2 + ... + {n}?", f"{n} * {n + 1} / 2 = {ans}.", str(ans)
        a, r = rng.randint(1, 9), rng.randint(2, 5)
        terms = [a * r**i for i in range(4)]
        nxt = terms[-1] * r
        sol = f"Each step multiplies by {r}. {terms[-1]} * {r} = {nxt}."
        return f"What comes next: {', '.join(map(str, terms))}, ?", sol, str(nxt)
    n, d = rng.randint(8, 25), rng.randint(2, 9)
    last = a + (n - 1) * d
    ans = n * (a + last) // 2 if n * (a + last) % 2 == 0 else Fraction(n * (a + last), 2)
    shown = ", ".join(str(a + i * d) for i in range(3))
    prob = f"Find the sum of the first {n} terms of {shown}, ..."
    sol = f"Last term {a} + {n - 1} * {d} = {last}. Sum = {n} * ({a} + {last}) / 2 = {format_number(ans)}."
    return prob, sol, format_number(ans)


def _euclid_steps(a: int, b: int) -> tuple[int, list[str]]:
    """gcd(a, b) with the Euclid steps written out (``a = q * b + r``)."""
    steps = []
    while b:
        q, r = divmod(a, b)
        steps.append(f"{a} = {q} * {b} + {r}.")
        a, b = b, r
    return a, steps


def gcd_lcm(rng: random.Random, level: int) -> Problem:
    """Greatest common divisors by Euclid's algorithm and least common multiples from them."""
    scale = {1: 8, 2: 9, 3: 15, 4: 20, 5: 12}[level]
    g = rng.randint(2, scale)
    a, b = g * rng.randint(2, scale), g * rng.randint(2, scale)
    if a == b:
        b += g
    hi, lo = max(a, b), min(a, b)
    gcd, steps = _euclid_steps(hi, lo)
    if level in (1, 3):
        return f"Find gcd({a}, {b}).", " ".join(steps) + f" gcd = {gcd}.", str(gcd)
    if level in (2, 4):
        lcm = a * b // gcd
        return f"Find lcm({a}, {b}).", " ".join(steps) + f" lcm = {a} * {b} / {gcd} = {lcm}.", str(lcm)
    c = g * rng.randint(2, scale)
    lcm_ab = a * b // gcd
    lcm = lcm_ab * c // math.gcd(lcm_ab, c)
    sol = f"lcm({a}, {b}) = {lcm_ab}. lcm({lcm_ab}, {c}) = {lcm}."
    return f"Find lcm({a}, {b}, {c}).", sol, str(lcm)


#: The running value of a chain stays in this range, so every step reads as small whole-number arithmetic.
CHAIN_RANGE = range(100)
#: One chain operation: (running value, digit) -> the new value, or None where the digit does not apply (a product
#: or quotient by 1 or of 0 would be a step with nothing to compute; a quotient must be exact).
_CHAIN_OPS: dict[str, Callable[[int, int], int | None]] = {
    "+": lambda value, digit: value + digit,
    "-": lambda value, digit: value - digit,
    "*": lambda value, digit: value * digit if value and digit > 1 else None,
    "/": lambda value, digit: value // digit if value and digit > 1 and value % digit == 0 else None,
}
_CHAIN_ASK = (
    "Start at {start}, then {ops}. What is the result?",
    "From {start}, apply {ops} in order. What is the result?",
    "Take {start}, then {ops}. What is the final value?",
)


def chain_moves(value: int) -> dict[str, list[tuple[int, int]]]:
    """Every single-digit operation that keeps ``value`` an integer in :data:`CHAIN_RANGE`: op -> [(digit, result)]."""
    moves: dict[str, list[tuple[int, int]]] = {}
    for op, apply in _CHAIN_OPS.items():
        results = [(digit, apply(value, digit)) for digit in range(1, 10)]
        kept = [(digit, result) for digit, result in results if result in CHAIN_RANGE]
        if kept:
            moves[op] = kept
    return moves


# computed once: a chain world draws tens of thousands of problems and every step would otherwise try 36 moves
_CHAIN_TABLE = {value: chain_moves(value) for value in CHAIN_RANGE}


def chain(rng: random.Random, level: int) -> Problem:
    """A long chain: ``level + 3`` single-digit operations on a running value in 0..99, one sentence per operation.

    Many steps, each easy: the world where a mistake can come late in a right-looking solution (issue 51). The
    operation is drawn uniformly among those that apply, then its digit, so no kind of step dominates a chain."""
    value = start = rng.randint(10, 99)
    ops, steps = [], []
    for _ in range(level + 3):
        moves = _CHAIN_TABLE[value]
        op = _pick(rng, list(moves))
        digit, result = moves[op][rng.randrange(len(moves[op]))]
        ops.append(f"{op} {digit}")
        steps.append(f"{value} {op} {digit} = {result}.")
        value = result
    problem = _pick(rng, _CHAIN_ASK).format(start=start, ops=", ".join(ops))
    return problem, " ".join(steps), str(value)


SKILLS: dict[str, SkillFn] = {
    "arithmetic": arithmetic,
    "linear_equation": linear_equation,
    "fractions": fractions,
    "percent": percent,
    "word_problem": word_problem,
    "remainder": remainder,
    "powers": powers,
    "sequence": sequence,
    "gcd_lcm": gcd_lcm,
    "chain": chain,
}


# -------------------------------------------------------------------------------------------------------- generation
def normalize_problem(text: str) -> str:
    """The key used to detect duplicate problems: lower case, single spaces, no trailing punctuation."""
    return " ".join(text.lower().split()).rstrip(".?! ")


def _check_levels(levels: Sequence[int]) -> tuple[int, ...]:
    """Validate requested levels against :data:`LEVELS`."""
    bad = [lvl for lvl in levels if lvl not in LEVELS]
    if bad or not levels:
        raise ValueError(f"levels must be a non-empty subset of {LEVELS}, got {tuple(levels)}")
    return tuple(levels)


def make_record(rng: random.Random, skill: str, level: int, record_id: str, source: str = "synthetic") -> dict:
    """One problem record of ``skill`` at ``level`` drawn from ``rng``."""
    problem, solution, answer = lookup(SKILLS, skill, "skill")(rng, level)
    return {
        "id": record_id,
        "problem": problem,
        "solution": solution,
        "answer": answer,
        "skill": skill,
        "level": level,
        "source": source,
    }


def generate_problems(
    n: int,
    seed: int | str,
    levels: Sequence[int] = LEVELS,
    skills: Sequence[str] | None = None,
    *,
    level_weights: Sequence[float] | None = None,
    exclude: Collection[str] = frozenset(),
    id_prefix: str | None = None,
) -> list[dict]:
    """``n`` distinct problems drawn with ``random.Random(seed)``; same arguments, same list.

    Args:
        n: number of records.
        seed: the only source of randomness (an int, or a str: ``random.Random`` hashes it with sha512).
        levels: difficulty levels to draw from (subset of 1..5), uniformly unless ``level_weights`` is given.
        skills: skill names from :data:`SKILLS` (default: all), drawn uniformly.
        level_weights: relative weight of each entry of ``levels``.
        exclude: normalized problem texts (see :func:`normalize_problem`) that must not be produced, e.g. held-out
            benchmark problems.
        id_prefix: ids are ``f"{id_prefix}-{index:05d}"``; default ``f"synthetic-{seed}"``.

    Raises:
        UnknownNameError: for an unknown skill; ValueError for bad levels; RuntimeError when the requested skills and
        levels cannot supply ``n`` distinct problems.
    """
    levels = _check_levels(levels)
    skill_names = list(SKILLS) if skills is None else list(skills)
    for name in skill_names:
        lookup(SKILLS, name, "skill")
    prefix = id_prefix or f"synthetic-{seed}"
    rng = random.Random(seed)
    seen, records = set(exclude), []
    max_draws = 200 * n + 1000  # rejection sampling: tiny level-1 spaces fill up, so allow generous retries
    for _ in range(max_draws):
        if len(records) == n:
            break
        skill = skill_names[rng.randrange(len(skill_names))]
        level = rng.choices(levels, weights=level_weights)[0]
        record = make_record(rng, skill, level, f"{prefix}-{len(records):05d}")
        key = normalize_problem(record["problem"])
        if key not in seen:
            seen.add(key)
            records.append(record)
    if len(records) < n:
        raise RuntimeError(f"only {len(records)} distinct problems of {n} for skills={skill_names}, levels={levels}")
    return records
