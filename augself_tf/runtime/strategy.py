"""Choosing the tf.distribute strategy: one device, mirrored (GPUs or split CPU), multi-worker, or TPU."""

from __future__ import annotations

import json
import os
import socket

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
#: Where TPUClusterResolver itself looks for a TPU when given none (Cloud TPU nodes, GKE).
TPU_ENVIRONMENT = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")
#: Seconds a TPU name's lookup (Cloud TPU API / GCE metadata server, plain HTTP without a timeout of its own)
#: may take before the run gives up: without a network it would otherwise wait on the socket indefinitely.
TPU_LOOKUP_TIMEOUT = 60


def split_cpu(replicas: int) -> None:
    """Splits the CPU into `replicas` logical devices; must run before TensorFlow touches a device."""
    if replicas <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError as err:  # already initialised: keep what exists if it is enough
        if len(tf.config.list_logical_devices("CPU")) < replicas:
            raise RuntimeError(f"cannot split the CPU into {replicas} devices after TensorFlow started") from err


def make_strategy(kind: str = "auto", cpu_replicas: int = 1, tpu: str | None = None) -> tf.distribute.Strategy:
    """Builds the strategy. `auto`: multi-worker if TF_CONFIG names several workers, else mirrored over all
    GPUs (or `cpu_replicas` logical CPUs) when there is more than one device, else one device. `tpu`: a
    TPUStrategy on the TPU `tpu` names (:func:`tpu_strategy`); `auto` never picks it.

    Raises:
      ValueError: an unknown kind, or no TPU found for `tpu` (one line naming what was tried).
    """
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy '{kind}'; choose from {', '.join(STRATEGIES)}")
    if kind == "tpu":
        return tpu_strategy(tpu)
    if kind == "multi_worker" or (kind == "auto" and _tf_config_workers() > 1):
        if cpu_replicas > 1:
            split_cpu(cpu_replicas)
        return tf.distribute.MultiWorkerMirroredStrategy()
    split_cpu(cpu_replicas)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")][: max(1, cpu_replicas)]
    if kind == "mirrored" or (kind == "auto" and len(devices) > 1):
        if len(devices) > 1 and not gpus:
            # NCCL is GPU-only; plain reductions work between logical CPUs.
            return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        return tf.distribute.MirroredStrategy(devices)
    return tf.distribute.OneDeviceStrategy(devices[0])


def tpu_strategy(tpu: str | None = None) -> tf.distribute.TPUStrategy:
    """Connects to the TPU, initialises its system and returns a TPUStrategy over all its cores.

    Args:
      tpu: a Cloud TPU name, a ``grpc://host:8470`` address, or ``local`` (the chips of this TPU VM). Empty: the
        environment's (``TPU_NAME``, ``KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS``), else ``local`` when this machine has
        TPU devices. Never the resolver's own guess: with no name it asks the GCE metadata server, which on a
        machine without one fails slowly or not at all.

    Raises:
      ValueError: no TPU was found; one line naming what was tried.
    """
    target = tpu or next((os.environ[k] for k in TPU_ENVIRONMENT if os.environ.get(k)), None)
    if not target:
        if not tf.config.list_physical_devices("TPU"):
            raise ValueError("--strategy=tpu: no TPU found: --tpu is empty, " + " and ".join(TPU_ENVIRONMENT)
                             + " are unset, and this machine has no TPU devices; pass --tpu=NAME, "
                               "--tpu=grpc://HOST:8470 or, on a TPU VM, --tpu=local")
        target = "local"
    tried = f"--tpu={tpu}" if tpu else f"--tpu unset, so {target!r}"
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(TPU_LOOKUP_TIMEOUT)  # bounds the resolver's name lookup over HTTP
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as err:
        reason = (getattr(err, "message", None) or str(err) or type(err).__name__).strip().splitlines()[0][:200]
        raise ValueError(f"--strategy=tpu: no TPU found ({tried}): {reason}") from None
    finally:
        socket.setdefaulttimeout(previous)
    return tf.distribute.TPUStrategy(resolver)


def preferred_mixed_precision() -> str:
    """The mixed-precision dtype to use here: ``bfloat16`` on a TPU, on GPUs that all have it (compute capability
    8.0 and later: A100, L4, H100, ...) and on CPU; ``float16`` on older GPUs (V100, T4), whose loss scaling
    skips a step with an overflow on any replica (training/loss_scale.py). bfloat16 has float32's range: no
    loss scaling, no skipped steps."""
    gpus = tf.config.list_physical_devices("GPU")
    capabilities = [tf.config.experimental.get_device_details(g).get("compute_capability") for g in gpus]
    if gpus and any(c is None or c < (8, 0) for c in capabilities):
        return "float16"
    return "bfloat16"


#: How ``--jit_compile`` compiles the step (:func:`compile_mode`).
REPLICA_FUNCTION = "replica_function"
CLUSTERS = "clusters"
#: Cross-replica ops XLA cannot compile for CPU devices: left outside the step's compiled clusters.
COLLECTIVE_OPS = frozenset({"CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGatherV2", "CollectiveReduce",
                            "CollectiveGather", "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "NcclAllReduce",
                            "CollectiveAllToAllV2", "CollectiveAllToAllV3"})


def compile_mode(strategy: tf.distribute.Strategy) -> str:
    """How ``--jit_compile`` compiles the step on ``strategy``'s replicas.

    ``REPLICA_FUNCTION`` on one device or on GPU/TPU replicas: the replica function is XLA-compiled whole, its
    all-reduces inside it (on GPUs MirroredStrategy then runs it without merge_call, through NCCL).
    ``CLUSTERS`` on several CPU replicas: TF 2.21's XLA compiles no collective for CPU devices ("Collectives are not
    yet implemented for CPU devices when compiling with XLA", measured), so the step is traced in an XLA jit scope
    that marks every op but the collectives (:func:`compile_clusters`): XLA compiles the clusters between the
    cross-replica reductions, which run as TensorFlow ops.
    """
    if strategy.num_replicas_in_sync > 1 and not accelerated(strategy):
        return CLUSTERS
    return REPLICA_FUNCTION


def accelerated(strategy: tf.distribute.Strategy) -> bool:
    """Whether ``strategy``'s replicas are GPUs or TPUs (not CPUs): what `compile_mode` and a run's
    ``--steps_per_execution=auto`` (`augself_tf.training.train_config.resolve_steps_per_execution`) ask of them."""
    kinds = {tf.DeviceSpec.from_string(d).device_type for d in strategy.extended.worker_devices}
    return bool(kinds) and kinds <= {"GPU", "TPU"}


def compile_clusters():
    """The context to trace a replica step in for ``CLUSTERS``: every op XLA can compile, the collectives excepted,
    is marked for compilation, so TensorFlow compiles the step as clusters around its cross-replica reductions.
    Scoped to the step (the input pipeline's functions stay as they are, which global auto-clustering would not)."""
    return tf.xla.experimental.jit_scope(compile_ops=lambda node_def: node_def.op not in COLLECTIVE_OPS,
                                         separate_compiled_gradients=False)


def _tf_config_workers() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as err:
        raise ValueError(f"TF_CONFIG is not valid JSON: {err}") from err
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0
                                             and "chief" not in resolver.cluster_spec().as_dict())
