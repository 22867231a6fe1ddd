"""TensorFlow 2 with Keras 3: the adapter, its ONNX op kernels, its network builder (a Keras
model) and its strategies (tf.distribute). Importing this package imports no framework."""

ADAPTERS = {"tensorflow": "suite.adapters.tensorflow.adapter:TensorFlowAdapter"}
