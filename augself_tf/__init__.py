"""AugSelf in TensorFlow 2 / Keras 3."""
