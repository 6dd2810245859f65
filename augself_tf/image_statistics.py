"""Per-channel statistics of [0, 1] pixels that models normalise their input with (the reference code's Normalize).

torchvision's ImageNet values, which are also ImageNet100's and every other source's default, and the paper's STL10
values. Data sources report them and the backbone defaults to them; both import them from here, so neither
package imports the other.
"""

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
STL10_MEAN, STL10_STD = (0.43, 0.42, 0.39), (0.27, 0.26, 0.27)
