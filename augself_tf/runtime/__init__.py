"""Run-time helpers both programs share (augself-train and augself-eval): the ``tf.distribute`` strategy,
bit-exact mode, and a run's TensorBoard directory (eval results written into it, scalars read back).

Neither :mod:`augself_tf.training` nor :mod:`augself_tf.evaluation` is imported here, so each can use it.
"""
