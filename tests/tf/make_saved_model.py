#!/usr/bin/env python3
"""Makes the SavedModel fixture of the SavedModel import/export tests (tensorflow-cpu 2.21):
tests/fixtures/tf/saved_model/mlp/ (a tf.Module MLP with a `serving_default` signature, its
variables in one TensorBundle shard) and mlp.io.npz beside it: the input `x` and the
signature's outputs (`y`, `h`), computed by TensorFlow from the saved directory.

    /work/venvs/tf/bin/python tests/tf/make_saved_model.py
"""
import os
import shutil

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "tf", "saved_model")


class Mlp(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(7)
        self.w1 = tf.Variable(rng.standard_normal((4, 8)).astype(np.float32), name="w1")
        self.b1 = tf.Variable(rng.standard_normal((8,)).astype(np.float32), name="b1")
        self.w2 = tf.Variable(rng.standard_normal((8, 3)).astype(np.float32), name="w2")
        self.b2 = tf.Variable(rng.standard_normal((3,)).astype(np.float32), name="b2")
        # Non-float dtypes too: an int64 step counter and a float64 scale.
        self.step = tf.Variable(np.int64(42), name="step")
        self.scale = tf.Variable(np.float64(0.5), name="scale")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        y = (tf.matmul(h, self.w2) + self.b2) * tf.cast(self.scale, tf.float32)
        return {"y": y, "h": h}


def main():
    path = os.path.join(OUT, "mlp")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    m = Mlp()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    loaded = tf.saved_model.load(path)
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    out = loaded.signatures["serving_default"](x=tf.constant(x))
    np.savez(os.path.join(OUT, "mlp.io.npz"), x=x, y=out["y"].numpy(), h=out["h"].numpy())


if __name__ == "__main__":
    main()
