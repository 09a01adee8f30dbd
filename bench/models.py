"""Built-in models for ``maxaccel bench --model``: real network shapes with random weights,
built with ``onnx.helper`` (no file to ship), each with its feeds.

Small ones (under a millisecond on onnxruntime, where a session's per-step cost shows):
``audio`` (a spectrogram CNN whose 2x2 MaxPools alternate with 3x3 Convs), ``segnet`` (an
encoder-decoder whose MaxPools' Indices feed MaxUnpools), ``kws`` (a 1-D keyword-spotting CNN:
a MaxPool over time, a maxout Max of two Convs, a ReduceMax over time), ``m5`` (an M5-style
raw-waveform CNN: five 1-D Conv/BatchNorm/ReLU, each followed by a MaxPool of 4). Large ones: ``resnet18``
(ResNet-18 at 1x3x224x224, its stem MaxPool on the device) and ``control`` (a ResNet-style
trunk whose middle stage is a Loop and whose head is chosen by an If, with a MaxPool and a
GlobalMaxPool on the device).
"""

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ["BUILT_IN", "build"]

F32 = TensorProto.FLOAT


class _Builder:
    """Nodes and random (He-scaled) initializers of one graph."""

    def __init__(self, seed, prefix=""):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.initializers, self._count, self._prefix = [], [], 0, prefix

    def name(self, prefix):
        self._count += 1
        return f"{self._prefix}{prefix}{self._count}"

    def constant(self, array, prefix="c"):
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op_type, inputs, outputs=1, **attributes):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=names[0], **attributes))
        return names if outputs > 1 else names[0]

    def conv(self, x, channels_in, channels, kernel, stride=1, relu=True, dims=2):
        shape = (channels, channels_in) + (kernel,) * dims
        weights = (self.rng.standard_normal(shape)
                   * math.sqrt(2 / math.prod(shape[1:]))).astype(np.float32)
        y = self.node("Conv", [x, self.constant(weights, "w"),
                               self.constant(np.zeros(channels, np.float32), "b")],
                      kernel_shape=[kernel] * dims, strides=[stride] * dims,
                      pads=[kernel // 2] * (2 * dims))
        return self.node("Relu", [y]) if relu else y

    def batch_norm(self, x, channels):
        """An inference BatchNormalization of ``channels`` with random statistics."""
        scale, bias, mean = (self.rng.standard_normal((3, channels)) * 0.1
                             + [[1], [0], [0]]).astype(np.float32)
        variance = self.rng.uniform(0.5, 1.5, channels).astype(np.float32)
        return self.node("BatchNormalization",
                         [x] + [self.constant(v, "bn") for v in (scale, bias, mean, variance)])

    def gemm(self, x, features, classes):
        weights = (self.rng.standard_normal((classes, features))
                   / math.sqrt(features)).astype(np.float32)
        return self.node("Gemm", [x, self.constant(weights, "w"),
                                  self.constant(np.zeros(classes, np.float32), "b")], transB=1)

    def model(self, name, inputs, outputs, feeds, opset=18):
        graph = helper.make_graph(self.nodes, name, inputs, outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  ir_version=10, producer_name="maxaccel bench")
        return model, feeds


def _input(rng, name, shape):
    return (helper.make_tensor_value_info(name, F32, list(shape)),
            {name: rng.standard_normal(shape).astype(np.float32)})


def audio_model(seed=0):
    """A spectrogram CNN (1x1x64x96): three 3x3 Conv+ReLU, each followed by a 2x2 MaxPool,
    a GlobalMaxPool and a Gemm to 10 classes."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "spectrogram", (1, 1, 64, 96))
    x, channels = "spectrogram", 1
    for width in (16, 32, 64):
        x = b.conv(x, channels, width, 3)
        x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        channels = width
    x = b.node("Flatten", [b.node("GlobalMaxPool", [x])])
    logits = b.gemm(x, channels, 10)
    return b.model("audio_cnn", [value], [helper.make_tensor_value_info(logits, F32, [1, 10])],
                   feeds)


def segnet_model(seed=0):
    """A SegNet-style encoder-decoder (1x3x48x48): two Conv+ReLU and 2x2 MaxPools with
    Indices, a Conv, two MaxUnpools by those Indices each followed by a Conv, 4 classes."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "image", (1, 3, 48, 48))
    x = b.conv("image", 3, 16, 3)
    p1, i1 = b.node("MaxPool", [x], outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    x = b.conv(p1, 16, 32, 3)
    p2, i2 = b.node("MaxPool", [x], outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    x = b.conv(p2, 32, 32, 3)
    x = b.node("MaxUnpool", [x, i2], kernel_shape=[2, 2], strides=[2, 2])
    x = b.conv(x, 32, 16, 3)
    x = b.node("MaxUnpool", [x, i1], kernel_shape=[2, 2], strides=[2, 2])
    scores = b.conv(x, 16, 4, 3, relu=False)
    return b.model("segnet_small", [value],
                   [helper.make_tensor_value_info(scores, F32, [1, 4, 48, 48])], feeds)


def kws_model(seed=0):
    """A 1-D keyword-spotting CNN (1x40x400 MFCC frames): Conv+ReLU, a MaxPool over time, a
    maxout (Max of two Convs), a ReduceMax over time and a Gemm to 12 keywords."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "mfcc", (1, 40, 400))
    x = b.conv("mfcc", 40, 128, 3, dims=1)
    x = b.node("MaxPool", [x], kernel_shape=[2], strides=[2])
    x = b.node("Max", [b.conv(x, 128, 128, 3, relu=False, dims=1),
                       b.conv(x, 128, 128, 3, relu=False, dims=1)])
    x = b.node("ReduceMax", [x, b.constant(np.array([2], np.int64), "axes")], keepdims=0)
    logits = b.gemm(x, 128, 12)
    return b.model("kws_cnn", [value], [helper.make_tensor_value_info(logits, F32, [1, 12])],
                   feeds)


def m5_model(seed=0):
    """An M5-style raw-waveform CNN (Dai et al., "Very deep convolutional neural networks for
    raw waveforms", 2017) on 1x1x8000 samples (half a second at 16 kHz): five 1-D
    Conv+BatchNormalization+ReLU, the first 80 wide with stride 4, the others 3 wide, of 32,
    64, 128, 256 and 256 channels, each followed by a MaxPool of 4, then a GlobalAveragePool and
    a Gemm to 35 classes (Speech Commands)."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "waveform", (1, 1, 8000))
    x, channels = "waveform", 1
    for width, kernel, stride in ((32, 80, 4), (64, 3, 1), (128, 3, 1), (256, 3, 1),
                                  (256, 3, 1)):
        x = b.conv(x, channels, width, kernel, stride, relu=False, dims=1)
        x = b.node("Relu", [b.batch_norm(x, width)])
        x = b.node("MaxPool", [x], kernel_shape=[4], strides=[4])
        channels = width
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    logits = b.gemm(x, channels, 35)
    return b.model("m5", [value], [helper.make_tensor_value_info(logits, F32, [1, 35])],
                   feeds)


def _basic_block(b, x, channels_in, channels, stride):
    y = b.conv(x, channels_in, channels, 3, stride)
    y = b.conv(y, channels, channels, 3, relu=False)
    if stride != 1 or channels_in != channels:
        x = b.conv(x, channels_in, channels, 1, stride, relu=False)
    return b.node("Relu", [b.node("Add", [y, x])])


def resnet18_model(seed=0):
    """ResNet-18 (1x3x224x224, batch norms folded into the Convs): the 7x7 stem, its 3x3
    stride-2 MaxPool, four stages of two basic blocks, global average pool, 1000 classes."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "image", (1, 3, 224, 224))
    x = b.conv("image", 3, 64, 7, 2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = _basic_block(b, x, channels, width, stride)
        x = _basic_block(b, x, width, width, 1)
        channels = width
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    logits = b.gemm(x, channels, 1000)
    return b.model("resnet18", [value], [helper.make_tensor_value_info(logits, F32, [1, 1000])],
                   feeds)


def control_model(seed=0, steps=3):
    """A ResNet-style trunk with control flow (1x3x224x224): stem Conv and its MaxPool, a
    Loop running a residual block ``steps`` times (the trip count an initializer), a
    stride-2 block, then an If on a feed choosing the head: GlobalMaxPool (then) or
    GlobalAveragePool (else) before the Gemm."""
    b = _Builder(seed)
    value, feeds = _input(b.rng, "image", (1, 3, 224, 224))
    x = b.conv("image", 3, 64, 7, 2)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    body = _Builder(seed + 1, prefix="body_")
    carried = _basic_block(body, "state_in", 64, 64, 1)
    body.nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body.nodes.append(helper.make_node("Identity", [carried], ["state_out"]))
    loop_body = helper.make_graph(
        body.nodes, "residual_step",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("state_in", F32, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("state_out", F32, None)],
        initializer=body.initializers)
    x = b.node("Loop", [b.constant(np.array(steps, np.int64), "trips"),
                        b.constant(np.array(True), "always"), x], body=loop_body)
    x = _basic_block(b, x, 64, 128, 2)
    head = {}
    for branch, op_type in (("then", "GlobalMaxPool"), ("else", "GlobalAveragePool")):
        head[branch] = helper.make_graph(
            [helper.make_node("Flatten", [f"{branch}_pooled"], [f"{branch}_out"])], branch, [],
            [helper.make_tensor_value_info(f"{branch}_out", F32, [1, 128])])
    # The pools run outside the If (the GlobalMaxPool on the device); the If picks one.
    pooled_max = b.node("GlobalMaxPool", [x])
    pooled_mean = b.node("GlobalAveragePool", [x])
    head["then"].node[0].input[0] = pooled_max
    head["else"].node[0].input[0] = pooled_mean
    chosen = b.node("If", ["use_max"], then_branch=head["then"], else_branch=head["else"])
    logits = b.gemm(chosen, 128, 10)
    flag = helper.make_tensor_value_info("use_max", TensorProto.BOOL, [])
    feeds["use_max"] = np.array(True)
    return b.model("resnet_loop_if", [value, flag],
                   [helper.make_tensor_value_info(logits, F32, [1, 10])], feeds)


#: Name -> (description, builder) of each built-in model.
BUILT_IN = {
    "audio": ("audio CNN, Conv/MaxPool x3 (1x1x64x96)", audio_model),
    "segnet": ("SegNet-style, MaxPool Indices to MaxUnpool (1x3x48x48)", segnet_model),
    "kws": ("1-D keyword CNN, MaxPool, maxout Max, ReduceMax (1x40x400)", kws_model),
    "m5": ("M5 raw-waveform CNN, 1-D Conv/BatchNorm/MaxPool x5 (1x1x8000)", m5_model),
    "resnet18": ("ResNet-18 (1x3x224x224)", resnet18_model),
    "control": ("ResNet trunk with a Loop and an If (1x3x224x224)", control_model),
}


def build(name):
    """``(description, model, feeds)`` of built-in model ``name`` (KeyError if unknown)."""
    description, builder = BUILT_IN[name]
    model, feeds = builder()
    return description, model, feeds
