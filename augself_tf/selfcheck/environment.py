"""Environment: versions, CUDA/cuDNN, the devices and their compute capability, which low-precision dtypes are
native, the reduction the strategy picks, and the measured matmul peak of each dtype (the step's ceiling)."""

from __future__ import annotations

import os
import platform
import time

import keras
import tensorflow as tf

from augself_tf.runtime.strategy import preferred_mixed_precision
from augself_tf.selfcheck.verdicts import FAIL, NOT_APPLICABLE, PASS, Check

SECTION = "environment"
DTYPES = ("float32", "bfloat16", "float16")
#: What the project supports (pyproject.toml's ranges): (name, installed, lowest, first unsupported).
SUPPORTED = (("TensorFlow", tf.__version__, (2, 21), (2, 22)), ("Keras", keras.__version__, (3, 12), (4,)),
             ("Python", platform.python_version(), (3, 11), (4,)))
#: CPU flags of the matrix instructions oneDNN uses for a dtype's matmul on x86. Not avx512_fp16: TensorFlow's
#: float16 CPU matmul does not use it (measured: float16 as slow as float32 on a CPU that has it).
CPU_NATIVE = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("amx_fp16",)}


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _cpuinfo(field: str) -> str:
    """The first ``field`` of /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> set[str]:
    """The x86 feature flags of /proc/cpuinfo (empty elsewhere)."""
    return set(_cpuinfo("flags").split())


def devices() -> list[dict]:
    """The visible accelerators (or the logical CPUs): name, kind and, for a GPU, model and compute capability."""
    found = []
    for kind in ("TPU", "GPU"):
        physical = tf.config.list_physical_devices(kind)
        for i, d in enumerate(tf.config.list_logical_devices(kind)):
            details = tf.config.experimental.get_device_details(physical[i]) if i < len(physical) else {}
            cc = details.get("compute_capability")
            found.append({"name": d.name, "kind": kind, "model": details.get("device_name", ""),
                          "compute_capability": ".".join(map(str, cc)) if cc else None})
    if not found:
        found = [{"name": d.name, "kind": "CPU", "model": _cpuinfo("model name") or platform.machine(),
                  "compute_capability": None} for d in tf.config.list_logical_devices("CPU")]
    return found


def native_dtypes(found: list[dict]) -> dict[str, bool]:
    """Whether each low-precision dtype has native matrix units on every device here."""
    kinds = {d["kind"] for d in found}
    if "TPU" in kinds:
        return {"bfloat16": True, "float16": False}
    if "GPU" in kinds:
        ccs = [_version(d["compute_capability"] or "0") for d in found]
        return {"bfloat16": all(c >= (8, 0) for c in ccs), "float16": all(c >= (7, 0) for c in ccs)}
    flags = cpu_flags()
    return {dtype: any(f in flags for f in names) for dtype, names in CPU_NATIVE.items()}


def reduction(strategy: tf.distribute.Strategy) -> str:
    """The cross-device reduction the strategy picked, e.g. ``CollectiveAllReduce (NCCL)``."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "TPU all-reduce (XLA)"
    ops = getattr(strategy.extended, "_cross_device_ops", None)  # private: the only place TF keeps it
    if ops is None:
        ops = getattr(strategy.extended, "_collective_ops", None)
    if ops is None:
        return type(strategy).__name__
    name = type(ops).__name__
    options = getattr(strategy.extended, "_communication_options", None) or getattr(ops, "_options", None)
    implementation = getattr(options, "implementation", None)
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in strategy.extended.worker_devices}
    if name == "CollectiveAllReduce":
        detail = getattr(implementation, "name", "AUTO")
        if detail == "AUTO":
            detail = "AUTO: NCCL on GPUs" if "GPU" in kinds else "AUTO: ring on CPUs"
        return f"{name} ({detail})"
    return name


def reduction_check(strategy: tf.distribute.Strategy) -> Check:
    """The reduction GPUs need (NCCL collectives) or the one ``--cpu_replicas`` sets (to one device)."""
    replicas = strategy.num_replicas_in_sync
    name = reduction(strategy)
    values = {"reduction": name, "replicas": replicas, "strategy": type(strategy).__name__}
    if replicas == 1:
        return Check(SECTION, "cross-replica reduction", NOT_APPLICABLE, f"{name}: one replica, nothing to reduce",
                     values)
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in strategy.extended.worker_devices}
    if "GPU" in kinds:
        ok = "Nccl" in name or "NCCL" in name
        return Check(SECTION, "cross-replica reduction", PASS if ok else FAIL,
                     f"{name} over {replicas} GPUs" + ("" if ok else ": not NCCL, the GPUs' fast path"), values)
    return Check(SECTION, "cross-replica reduction", PASS, f"{name} over {replicas} {'/'.join(sorted(kinds))} "
                 "replicas", values)


def _timed_call(fn, x) -> float:
    t0 = time.perf_counter()
    fn(x).numpy()
    return time.perf_counter() - t0


CHAIN = 4


def _chained_matmuls(device: str, b: tf.Tensor):
    """x -> sum(x·b·b·b·b) on ``device``: `CHAIN` dependent matmuls, which no optimiser can merge or drop."""

    @tf.function(jit_compile=("TPU" in device.upper()) or None)  # TPUs run compiled functions only
    def run(x):
        with tf.device(device):
            for _ in range(CHAIN):
                x = tf.matmul(x, b)
            return tf.reduce_sum(tf.cast(x, tf.float32))

    return run


def matmul_peak(device: str, dtype: str, seconds: float, max_n: int) -> tuple[float, int]:
    """FLOP/s of chained n×n matmuls in ``dtype`` on ``device`` (n doubled from 256 until a call takes 20 ms or
    reaches ``max_n``), timed for about ``seconds``; and that n."""
    n = 256
    while True:
        with tf.device(device):
            b = tf.cast(tf.random.normal([n, n], seed=1) / n**0.5, dtype)  # keeps the chain's norm about 1
            x = tf.cast(tf.random.normal([n, n], seed=2), dtype)
        run = _chained_matmuls(device, b)
        _timed_call(run, x)  # traces and warms up
        first = _timed_call(run, x)
        if first >= 0.02 or n >= max_n:
            break
        n *= 2
    calls, elapsed = 1, first
    while elapsed < seconds:
        elapsed += _timed_call(run, x)
        calls += 1
    return 2.0 * n**3 * CHAIN * calls / elapsed, n


def checks(strategy: tf.distribute.Strategy, seconds: float, facts: dict) -> list[Check]:
    """Every environment line; ``facts`` receives what the other sections and the JSON need (devices, dtypes,
    the peaks in FLOP/s per dtype)."""
    out = []
    for name, installed, low, high in SUPPORTED:
        ok = low <= _version(installed) < high
        wanted = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
        out.append(Check(SECTION, name, PASS if ok else FAIL, f"{installed}" + ("" if ok else f" (supported: "
                         f"{wanted})"), {"version": installed, "supported": wanted}))
    build = {k: v for k, v in tf.sysconfig.get_build_info().items() if isinstance(v, str | bool | int | list | tuple)}
    found = devices()
    kinds = {d["kind"] for d in found}
    facts.update(build_info=build, devices=found, cpu_count=os.cpu_count(), platform=platform.platform())
    cuda = f"CUDA {build.get('cuda_version', '-')}, cuDNN {build.get('cudnn_version', '-')}"
    if "GPU" in kinds:
        out.append(Check(SECTION, "CUDA / cuDNN", PASS, f"{cuda} (TensorFlow's build)", build))
    elif build.get("is_cuda_build"):
        out.append(Check(SECTION, "CUDA / cuDNN", FAIL, f"{cuda} build, but no GPU visible: driver or CUDA "
                         "libraries missing (TensorFlow's log at start-up says which)", build))
    elif os.path.exists("/dev/nvidia0"):
        out.append(Check(SECTION, "CUDA / cuDNN", FAIL, "a GPU is present (/dev/nvidia0) but TensorFlow is a CPU "
                         "build: install tensorflow[and-cuda] of the same version", build))
    else:
        out.append(Check(SECTION, "CUDA / cuDNN", NOT_APPLICABLE, "CPU build, no GPU", build))
    models = sorted({d["model"] for d in found})
    out.append(Check(SECTION, "visible devices", PASS, f"{len(found)} × {'/'.join(sorted(kinds))} "
                     f"({', '.join(m for m in models if m) or 'logical'}); {strategy.num_replicas_in_sync} replicas "
                     f"in the strategy", {"devices": found, "replicas": strategy.num_replicas_in_sync}))
    if "GPU" in kinds:
        ccs = sorted({d["compute_capability"] for d in found})
        out.append(Check(SECTION, "compute capability", PASS, ", ".join(ccs), {"compute_capability": ccs}))
    else:
        out.append(Check(SECTION, "compute capability", NOT_APPLICABLE, f"no GPU ({'/'.join(sorted(kinds))})"))
    native = native_dtypes(found)
    fast = "bfloat16" if "TPU" in kinds else preferred_mixed_precision()
    facts.update(native=native, fast_dtype=fast)
    shown = ", ".join(f"{k} {'native' if v else 'emulated'}" for k, v in native.items())
    out.append(Check(SECTION, "native low precision", PASS if native[fast] else NOT_APPLICABLE,
                     f"{shown}; --mixed_precision here: {fast}" + ("" if native[fast] else
                                                                   " (not native: float32 is as fast or faster)"),
                     {"native": native, "preferred_mixed_precision": fast}))
    out.append(reduction_check(strategy))
    device = strategy.extended.worker_devices[0]
    max_n = 1024 if kinds == {"CPU"} else 8192
    peaks = {}
    for dtype in DTYPES:
        if "TPU" in kinds and dtype == "float16":
            out.append(Check(SECTION, f"matmul peak {dtype}", NOT_APPLICABLE, "TPUs compute in bfloat16"))
            continue
        flops, n = matmul_peak(device, dtype, seconds, max_n)
        # Logical CPUs share the machine's cores: the machine's peak is one device's; accelerators add up.
        total = flops if kinds == {"CPU"} else flops * strategy.num_replicas_in_sync
        peaks[dtype] = total
        out.append(Check(SECTION, f"matmul peak {dtype}", PASS, f"{flops / 1e12:.3g} TFLOP/s per device "
                         f"({n}×{n}, {device.split('/')[-1]}); machine {total / 1e12:.3g} TFLOP/s",
                         {"flops_per_device": flops, "flops_machine": total, "n": n}))
    facts["peak_flops"] = peaks
    return out
