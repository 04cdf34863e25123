"""Random initialization schemes for an N×D embedding table ([K], [KB], [S], [A]; docs/concepts.md#random-schemes).

Every scheme knows its expected mean and std for a given shape, so it can also be the target of
:func:`lightning_embinit.init.transforms.standardize`. Each block of rows draws from its own generator seeded from the
caller's, so a seed gives the same matrix whatever the number of threads, and large tables fill on all cores.
"""

from __future__ import annotations

import ast
import math
import operator
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import torch

from lightning_embinit.init.registry import Registry
from lightning_embinit.init.statistics import row_blocks

SCHEMES: Registry[RandomScheme] = Registry("scheme")


@dataclass(frozen=True)
class RandomScheme:
    """A distribution over N×D matrices: ``normal`` (N(mean, std²)), ``uniform`` (U(−a, a)) or ``constant``."""

    name: str
    distribution: str
    std_of_shape: Callable[[int, int], float]
    mean: float = 0.0
    shape_dependent: bool = False  # a σ the user wrote in terms of n and d

    def std(self, num_embeddings: int, embedding_dim: int) -> float:
        """Expected element std for a ``num_embeddings × embedding_dim`` table."""
        return float(self.std_of_shape(num_embeddings, embedding_dim))

    def describe(self, num_embeddings: int, embedding_dim: int) -> str:
        """The name, with σ resolved for this table when the user wrote it in terms of n and d."""
        if not self.shape_dependent:
            return self.name
        return f"{self.name} (σ = {self.std(num_embeddings, embedding_dim):.6g})"

    def sample(
        self,
        num_embeddings: int,
        embedding_dim: int,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """A new CPU tensor of shape (N, D) drawn from this scheme."""
        out = torch.empty(num_embeddings, embedding_dim, dtype=torch.float32)
        self.fill_(out, generator=generator)
        return out if dtype == torch.float32 else out.to(dtype)

    def fill_(self, out: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Fill a 2-D float CPU tensor in place; deterministic for a given ``generator`` state."""
        if out.dim() != 2:
            raise ValueError(f"an embedding table is 2-D (N, D), got shape {tuple(out.shape)}")
        n, d = out.shape
        std, mean = self.std(n, d), self.mean
        if self.distribution == "constant":
            return out.fill_(mean)
        chunks = row_blocks(out.detach())  # worker threads do not inherit the caller's no_grad
        seeds = torch.randint(0, 2**62, (len(chunks),), generator=generator).tolist()

        def fill_chunk(index: int) -> None:
            chunk_generator = torch.Generator().manual_seed(seeds[index])
            if self.distribution == "uniform":
                bound = std * math.sqrt(3.0)
                chunks[index].uniform_(mean - bound, mean + bound, generator=chunk_generator)
            else:
                chunks[index].normal_(mean, std, generator=chunk_generator)

        workers = min(len(chunks), torch.get_num_threads(), os.cpu_count() or 1)
        if workers <= 1:
            for index in range(len(chunks)):
                fill_chunk(index)
        else:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(fill_chunk, range(len(chunks))))
        return out


def _check_std(std: float, where: str) -> float:
    """``std`` if it is a usable standard deviation, else a ValueError naming ``where``."""
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"{where}: the std must be a finite number ≥ 0, got {std!r}")
    if std > 1e30:
        raise ValueError(f"{where}: std {std!r} would overflow float32 embeddings")
    return std


_FUNCTIONS: dict[str, Callable[[float], float]] = {"sqrt": math.sqrt, "ln": math.log, "log": math.log, "exp": math.exp}
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def shape_expression(text: str) -> Callable[[int, int], float]:
    """σ as a function of the table's shape: numbers, ``n`` (rows), ``d`` (dimension), ``+ − × / **``,
    ``sqrt``, ``ln`` (= ``log``) and ``exp``; e.g. ``1/sqrt(d)`` or ``ln(n)/d`` ([S])."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(
            f"cannot read {text!r} as a number or an expression in n and d (e.g. 1/sqrt(d), ln(n)/d)"
        ) from None

    def value(node: ast.AST, n: int, d: int) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body, n, d)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in ("n", "d"):
            return float(n if node.id == "n" else d)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left, n, d), value(node.right, n, d))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand, n, d)
            return -inner if isinstance(node.op, ast.USub) else inner
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and len(node.args) == 1
            and not node.keywords
        ):
            return _FUNCTIONS[node.func.id](value(node.args[0], n, d))
        raise ValueError(f"{text!r}: only numbers, n, d, + - * / **, sqrt(), ln(), exp() are allowed")

    try:
        value(tree, 1024, 64)  # rejects unknown names and functions now, not at setup
    except (ArithmeticError, ValueError) as error:
        if not isinstance(error, ArithmeticError) and "only numbers" in str(error):
            raise
    return lambda n, d: value(tree, n, d)


@SCHEMES.register(
    "normal",
    takes_argument=True,
    summary="N(0, σ²): σ a number (normal:0.01 [KB]) or of the shape (normal:1/sqrt(d), normal:ln(n)/d)",
)
def normal(std: str | float) -> RandomScheme:
    where = f"scheme 'normal:{std}'"
    try:
        value = float(std)
    except (TypeError, ValueError):
        if not isinstance(std, str):
            raise ValueError(f"{where} needs a number or an expression in n and d after the colon") from None
        try:
            of_shape = shape_expression(std)
        except ValueError as error:
            raise ValueError(f"{where} needs a number or an expression in n and d after the colon: {error}") from None

        def checked(n: int, d: int) -> float:
            try:
                resolved = float(of_shape(n, d))
            except (ArithmeticError, ValueError) as error:
                raise ValueError(f"{where} for a {n}×{d} table: {error}") from None
            return _check_std(resolved, f"{where} for a {n}×{d} table")

        checked(1024, 64)
        return RandomScheme(f"normal:{std}", "normal", checked, shape_dependent=True)
    _check_std(value, where)
    return RandomScheme(f"normal:{std}", "normal", lambda n, d: value)


_FIXED_SCHEMES: dict[str, tuple[str, Callable[[int, int], float], float, str]] = {
    "xavier": (
        "uniform",
        lambda n, d: math.sqrt(2.0 / (n + d)),
        0.0,
        "Glorot uniform U(−a, a), a = √(6/(N+D)); σ = √(2/(N+D)) [K] default",
    ),
    "xavier_normal": ("normal", lambda n, d: math.sqrt(2.0 / (n + d)), 0.0, "Glorot normal N(0, 2/(N+D))"),
    "he": ("normal", lambda n, d: math.sqrt(2.0 / d), 0.0, "Kaiming normal with fan_in = D: N(0, 2/D)"),
    "zeros": ("constant", lambda n, d: 0.0, 0.0, "all zeros [KB]"),
    "ones": ("constant", lambda n, d: 0.0, 1.0, "all ones [KB]"),
    "log_n_over_d": (
        "normal",
        lambda n, d: math.log(n) / d,
        0.0,
        "N(0, (ln N / D)²): the tied-embedding countermeasure of [S]",
    ),
    "hf": ("normal", lambda n, d: 0.02, 0.0, "N(0, 0.02²): Hugging Face / BERT initializer_range"),
    "torch_default": ("normal", lambda n, d: 1.0, 0.0, "N(0, 1): torch's nn.Embedding default"),
}
"""The schemes without an argument: name → (distribution, σ of the shape (n, d), mean, summary)."""
for _name, (_distribution, _std, _mean, _summary) in _FIXED_SCHEMES.items():
    SCHEMES.add(_name, partial(RandomScheme, _name, _distribution, _std, _mean), summary=_summary)


def get_scheme(spec: str | RandomScheme) -> RandomScheme:
    """The scheme named by ``spec`` (``"xavier"``, ``"normal:0.01"``, ...), or ``spec`` itself."""
    return spec if isinstance(spec, RandomScheme) else SCHEMES.build(spec)
