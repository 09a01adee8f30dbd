"""Random MaxPool configurations (shape and ONNX attributes) for the reference's, the REDUCE
route's and the tile planner's tests."""


def random_config(rng, rank, max_size=6):
    kernel = [int(k) for k in rng.integers(1, 4, rank)]
    attributes = {"kernel_shape": kernel}
    if rng.random() < 0.7:
        attributes["strides"] = [int(s) for s in rng.integers(1, 4, rank)]
    if rng.random() < 0.5:
        attributes["dilations"] = [int(d) for d in rng.integers(1, 4, rank)]
    attributes["auto_pad"] = str(rng.choice(["NOTSET", "NOTSET", "VALID", "SAME_UPPER",
                                             "SAME_LOWER"]))
    if attributes["auto_pad"] == "NOTSET" and rng.random() < 0.7:
        attributes["pads"] = [int(p) for p in rng.integers(0, 4, 2 * rank)]
    attributes["ceil_mode"] = bool(rng.random() < 0.4)
    attributes["storage_order"] = int(rng.random() < 0.3)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) + tuple(
        int(n) for n in rng.integers(1, max_size + 1, rank))
    return shape, attributes


#: Largest spatial size of a random configuration, per rank (the corpora's).
CORPUS_MAX_SIZE = {1: 9, 2: 6, 3: 4}


def random_configs(rng, counts, max_size=CORPUS_MAX_SIZE):
    """``(shape, attributes)`` of ``counts[rank]`` random configurations of each rank 1, 2 and
    3, in that order, drawn from ``rng`` one at a time (the caller may draw between them)."""
    for rank in (1, 2, 3):
        for _ in range(counts[rank]):
            yield random_config(rng, rank, max_size=max_size[rank])
