"""The pure estimators of evaluation: fitting and scoring on arrays of features (NumPy, SciPy, scikit-learn, TF
maths), with no knowledge of SavedModels, datasets or reports; the floor every protocol stands on.

``errors`` (the one user-facing exception) lives on this floor too, so that nothing here imports upward.
"""
