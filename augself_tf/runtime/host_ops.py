"""Ops of a traced graph that pass through host memory when the graph runs on a GPU.

A GPU step is milliseconds: every device-to-host copy inside it stalls the device's queue until the host has
the value. These are the ops that make one (a data-dependent output size, an input the GPU kernel reads from
host memory, a CPU-only kernel) and nodes pinned to the CPU. ``host_memory_ops`` finds them in a concrete
function's graph, the functions it calls included (``tf.cond`` branches, nested ``tf.function``\\ s), so a
test can hold the accelerator's training step free of them (``tests/test_host_ops.py``) and
``python -m bench.bench_host_ops`` can count them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import tensorflow as tf

_DATA_SIZED = "output size depends on the values: the size is copied to the host before the output exists"
_PYTHON = "runs Python on the host: inputs and outputs are copied between device and host"
_BINCOUNT = "the number of bins (`size`) is read in host memory; tf.math.bincount computes it from the data"
_SEGMENT = "output rows = last segment id + 1, read back from the device"

#: op type -> why it goes through host memory on a GPU (TF 2.21 kernel registrations).
HOST_MEMORY_OPS: dict[str, str] = {
    "DynamicPartition": "part sizes depend on the partition values: the GPU kernel copies them to the host",
    "DynamicStitch": "the GPU kernel reads its indices from host memory (HostMemory(\"indices\"))",
    "ParallelDynamicStitch": "CPU-only kernel, indices decide the output size",
    "Where": "one-argument tf.where / tf.boolean_mask: " + _DATA_SIZED,
    "Unique": _DATA_SIZED,
    "UniqueV2": _DATA_SIZED,
    "UniqueWithCounts": _DATA_SIZED,
    "UniqueWithCountsV2": _DATA_SIZED,
    "ListDiff": "tf.compat.v1.setdiff1d: " + _DATA_SIZED,
    "NonMaxSuppressionV3": "number of boxes kept: " + _DATA_SIZED,
    "NonMaxSuppressionV4": "number of boxes kept: " + _DATA_SIZED,
    "NonMaxSuppressionV5": "number of boxes kept: " + _DATA_SIZED,
    "Bincount": _BINCOUNT,
    "DenseBincount": _BINCOUNT,
    "SparseBincount": _BINCOUNT,
    "RaggedBincount": _BINCOUNT,
    "SegmentSum": _SEGMENT,
    "SegmentMean": _SEGMENT,
    "SegmentMax": _SEGMENT,
    "SegmentMin": _SEGMENT,
    "SegmentProd": _SEGMENT,
    "PyFunc": "tf.numpy_function: " + _PYTHON,
    "PyFuncStateless": "tf.numpy_function (stateless): " + _PYTHON,
    "EagerPyFunc": "tf.py_function: " + _PYTHON,
    "Print": "CPU-only kernel: its inputs are copied to the host at every run",
    "PrintV2": "tf.print: a string op on the host, its inputs copied there at every run",
    "Assert": "CPU-only kernel: its condition and data are copied to the host at every run",
    "If": "tf.cond: the GPU kernel reads its predicate from host memory (HostMemory(\"cond\"))",
    "StatelessIf": "tf.cond: the GPU kernel reads its predicate from host memory (HostMemory(\"cond\"))",
    "Case": "tf.switch_case: the GPU kernel reads its branch index from host memory",
    "StatelessCase": "tf.switch_case: the GPU kernel reads its branch index from host memory",
    "While": "tf.while_loop: its condition is copied to the host at every iteration",
    "StatelessWhile": "tf.while_loop: its condition is copied to the host at every iteration",
}
#: op type prefixes of string and encoding ops: CPU-only kernels (strings live in host memory).
HOST_OP_PREFIXES: tuple[str, ...] = ("String", "Regex", "AsString", "Decode", "Encode", "Substr")


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of a traced graph: its op type, the device it is pinned to ("" = the placer decides), its name,
    and the function it sits in ("" = the graph itself)."""

    op: str
    device: str
    name: str
    function: str


@dataclasses.dataclass(frozen=True)
class HostOp:
    """A node that goes through host memory on a GPU, and why; ``pinned`` when the reason is its CPU device
    (the op itself may be fine on a GPU)."""

    node: Node
    reason: str
    pinned: bool = False


def graph_nodes(graph_def: tf.compat.v1.GraphDef) -> Iterator[Node]:
    """Every node of ``graph_def`` and, once each, of every function of its library that a node calls: by op
    type (a function call node) or through a function attribute (``If``/``While`` branches, ``PartitionedCall``)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    seen: set[str] = set()
    stack = [("", list(graph_def.node))]
    while stack:
        function, nodes = stack.pop()
        for node in nodes:
            yield Node(node.op, node.device, node.name, function)
            called = [node.op] if node.op in library else []
            for attr in node.attr.values():
                if attr.HasField("func"):
                    called.append(attr.func.name)
                if attr.HasField("list"):
                    called += [f.name for f in attr.list.func]
            for name in called:
                if name in library and name not in seen:
                    seen.add(name)
                    stack.append((name, list(library[name].node_def)))


def _pinned_to_cpu(device: str) -> bool:
    try:
        return (tf.DeviceSpec.from_string(device).device_type or "").upper() == "CPU"
    except ValueError:  # not a device string TensorFlow parses: the placer would reject it anyway
        return False


def host_memory_ops(graph_def: tf.compat.v1.GraphDef) -> list[HostOp]:
    """The nodes of ``graph_def`` (functions included) that pass through host memory when it runs on a GPU:
    ops of ``HOST_MEMORY_OPS``, string ops (``HOST_OP_PREFIXES``) and any node pinned to a CPU device."""
    found = []
    for node in graph_nodes(graph_def):
        if node.op in HOST_MEMORY_OPS:
            found.append(HostOp(node, HOST_MEMORY_OPS[node.op]))
        elif node.op.startswith(HOST_OP_PREFIXES):
            found.append(HostOp(node, "string op: CPU-only kernel, strings live in host memory"))
        elif _pinned_to_cpu(node.device):
            found.append(HostOp(node, f"pinned to {node.device}", pinned=True))
    return found


def count_by_op(ops: list[HostOp]) -> dict[str, int]:
    """{op type: how many}, most frequent first (a pinned node counts under its op type plus " (CPU)")."""
    counts: dict[str, int] = {}
    for op in ops:
        key = f"{op.node.op} (CPU)" if op.pinned else op.node.op
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
