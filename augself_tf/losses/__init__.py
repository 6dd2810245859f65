"""Losses as pure functions of tensors: one unit per loss, each tested against an independent NumPy computation.

A method computes its heads' outputs and calls one of these; none holds a layer or a variable, and the package
imports nothing else of augself_tf (tests/test_losses.py holds it to that). ``negative_cosine`` (SimSiam),
``byol_regression`` (BYOL), ``info_nce`` (MoCo: the logits of q against its positive key and a queue, and their
cross-entropy), ``nt_xent`` (SimCLR, across replicas), ``swapped_prediction`` (SwAV: Sinkhorn-Knopp codes and the
swapped loss), ``dino_distillation`` (DINO: the student's crops against the teacher's centred global crops, and
the center), ``masked_cross_entropy`` (supervised pretraining), ``augself_heads`` (AugSelf: the loss of each
target kind, both pair orders), ``stl_terms`` (STL: the pair swap, the hypernetwork's per-example maps, the
transformation term's positives and the two NT-Xent terms; tested in tests/test_objectives_stl.py). Cross-replica
gathering belongs to the loss that needs it; the 1/replicas gradient scaling is the train step's
(``AugSelfModel.train_step``).
"""
