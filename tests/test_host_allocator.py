"""The entry points' host allocator: TensorFlow's BFC pool on the CPU unless the user chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

from augself_tf.startup import pool_host_memory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What train_main, eval_main and the self-check do first; then the CPU allocator's statistics, which TensorFlow
# keeps only for a BFC allocator (malloc's raises "Allocator stats not available").
PROGRAM = """
from augself_tf.startup import import_tensorflow_quietly
import_tensorflow_quietly()
import tensorflow as tf
x = tf.ones([512, 512])
y = tf.matmul(x, x)
print("peak", tf.config.experimental.get_memory_info("CPU:0")["peak"])
"""


def test_a_program_started_as_the_entry_points_start_allocates_from_the_pool():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPU_")}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak = int(proc.stdout.split("peak")[-1])
    assert peak >= 2 * 512 * 512 * 4  # x and y were allocated from it


def test_the_pool_is_the_default_and_its_limit_the_machines_memory():
    env: dict[str, str] = {}
    pool_host_memory(env)
    physical_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
    assert int(env["TF_CPU_BFC_MEM_LIMIT_IN_MB"]) == max(physical_mb, 1 << 16)  # never below TensorFlow's 64 GB


def test_what_the_user_set_is_kept():
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_CPU_BFC_MEM_LIMIT_IN_MB": "1000"}
    pool_host_memory(env)
    assert env == {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_CPU_BFC_MEM_LIMIT_IN_MB": "1000"}
