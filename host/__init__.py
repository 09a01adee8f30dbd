"""Host driver for maxaccel: wire protocol, transports, tensor API, ONNX offload.

This package never imports amaranth: a host script talks to a board with numpy alone.
"""
