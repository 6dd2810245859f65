"""The floating-point work of a traced training step: the multiply-adds of its convolutions (forward and both
backward ops) and matmuls, read from the op shapes of its graph, the functions it calls included. What a share
of the matmul peak is taken of; the rest of the step (batch norm, activations, the photometric stage) is
memory-bound work that the peak does not describe."""

from __future__ import annotations

import math

import tensorflow as tf

CONV_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative")
MATMUL_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_BRANCHING = ("If", "StatelessIf", "Case", "StatelessCase")


def _dims(shape: tf.TensorShape) -> list[int] | None:
    return shape.as_list() if shape.rank is not None and shape.is_fully_defined() else None


def op_flops(op: tf.Operation) -> int | None:
    """2·multiply-adds of one conv or matmul op; None when a shape it needs is not static; 0 for other ops."""
    if op.type in CONV_OPS:
        if op.type == "Conv2D" or op.type == "DepthwiseConv2dNative":
            out, kernel = _dims(op.outputs[0].shape), _dims(op.inputs[1].shape)
        elif op.type == "Conv2DBackpropInput":  # (input_sizes, filter, out_backprop)
            out, kernel = _dims(op.inputs[2].shape), _dims(op.inputs[1].shape)
        else:  # Conv2DBackpropFilter: (input, filter_sizes, out_backprop) -> the filter's gradient
            out, kernel = _dims(op.inputs[2].shape), _dims(op.outputs[0].shape)
        if out is None or kernel is None:
            return None
        per_output = kernel[0] * kernel[1] * (1 if op.type == "DepthwiseConv2dNative" else kernel[2])
        return 2 * math.prod(out) * per_output
    if op.type in MATMUL_OPS:
        out, a = _dims(op.outputs[0].shape), _dims(op.inputs[0].shape)
        if out is None or a is None:
            return None
        transposed = op.get_attr("transpose_a") if op.type == "MatMul" else op.get_attr("adj_x")
        inner = a[-2] if transposed else a[-1]
        return 2 * math.prod(out) * inner
    return 0


def _called(op: tf.Operation) -> list[list[str]]:
    """The functions an op calls, grouped: one group per alternative (a branch op runs one of its groups)."""
    names = []
    for value in op.node_def.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names += [f.name for f in value.list.func]
    if op.type in _BRANCHING:
        return [[n] for n in names]
    return [names] if names else []


def graph_flops(graph: tf.Graph, _depth: int = 0, _root: tf.Graph | None = None) -> tuple[int, int]:
    """(FLOPs of one run of ``graph``, ops whose shapes were not static and so not counted). A called function
    counts once per call; a branch op counts its costliest branch."""
    root = graph if _root is None else _root
    total, unknown = 0, 0
    for op in graph.get_operations():
        flops = op_flops(op)
        if flops is None:
            unknown += 1
        else:
            total += flops
        if _depth > 20:
            continue
        best = (0, 0)
        for group in _called(op):
            group_total = (0, 0)
            for name in group:
                # Private, but the only way to a called function's graph; the outermost graph holds every one.
                function = graph._get_function(name) or root._get_function(name)
                inner = getattr(function, "graph", None)
                if inner is not None:
                    f, u = graph_flops(inner, _depth + 1, root)
                    group_total = (group_total[0] + f, group_total[1] + u)
            best = max(best, group_total)
        total, unknown = total + best[0], unknown + best[1]
    return total, unknown
