"""codistill's ResNet trunk for bench/jax_train.py (model kind resnet), in JAX.

A module of its own so that jax_train.py stays small; jax_train.py adds the classifier
head (hidden layers, output layer) and trains it. Imported after JAX has started (the
caller passes jax and jax.numpy in), as jax_train.py limits its threads before that.
"""

BN_EPS, BN_MOMENTUM = 1e-5, 0.1  # codistill's BatchNorm (nn/layers/batchnorm.hpp): PyTorch's convention


def resnet_trunk(jax, jnp, m, c, uniform, act, layout):
    """codistill's build_resnet (codistill/models/build.cpp) up to the classifier head: a 3x3
    stem of channels[0] -> bn -> act; one stage per channels entry of `blocks` basic blocks
    (conv3x3(stride) -> bn -> act -> conv3x3 -> bn, plus the identity or, where the width or
    the resolution changes, a 1x1 conv at the stride -> bn), each followed by the activation,
    the first block of every stage after the first at stride 2 (3x3 convs padded by 1: 28 ->
    14 -> 7); global average pooling. No conv has a bias (the bn after it has one).

    Returns (params, stats, apply(params, stats, x, training) -> (features, stats), width).
    Batch norm: training normalizes with the batch's mean and biased variance and returns
    the running statistics updated as codistill does (running = (1 - momentum) * running +
    momentum * batch statistic, the variance unbiased, M/(M-1)); evaluation uses the running
    statistics. Gradients flow through the batch statistics (autodiff), not into the running
    ones, which are state, not parameters (the optimizer never sees them)."""
    lax = jax.lax
    nchw = layout == "NCHW"
    dims = ("NCHW", "OIHW", "NCHW") if nchw else ("NHWC", "HWIO", "NHWC")
    spatial = (2, 3) if nchw else (1, 2)
    per_channel = (lambda v: v.reshape(-1, 1, 1)) if nchw else (lambda v: v)  # broadcast over C

    params, stats = {}, {}

    def conv_bn(name, cin, cout, k):
        # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = cin*k*k: codistill's kaiming_uniform.
        params[name] = {"w": uniform((cout, cin, k, k) if nchw else (k, k, cin, cout), cin * k * k),
                        "g": jnp.ones((cout,), jnp.float32), "b": jnp.zeros((cout,), jnp.float32)}
        stats[name] = {"mean": jnp.zeros((cout,), jnp.float32), "var": jnp.ones((cout,), jnp.float32)}

    # Drawn in codistill's order: the stem, then each block's body (conv1, conv2), its shortcut.
    channels = m.get("channels", [32, 64])
    conv_bn("stem", c, channels[0], 3)
    c, blocks = channels[0], []
    for s, width in enumerate(channels, start=1):
        for k in range(1, m.get("blocks", 1) + 1):
            name, stride = f"stage{s}_block{k}", 2 if s > 1 and k == 1 else 1
            conv_bn(name + "/conv1", c, width, 3)
            conv_bn(name + "/conv2", width, width, 3)
            project = stride != 1 or c != width
            if project:
                conv_bn(name + "/shortcut", c, width, 1)
            blocks.append((name, stride, project))
            c = width

    def apply(ps, st, x, training):
        new = {}

        def unit(name, x, stride):
            p = ps[name]
            k = p["w"].shape[2] if nchw else p["w"].shape[0]
            y = lax.conv_general_dilated(x, p["w"], (stride, stride), [(k // 2, k // 2)] * 2, dimension_numbers=dims)
            if training:
                axes = (0,) + spatial
                mean = jnp.mean(y, axis=axes)
                var = jnp.mean(jnp.square(y - per_channel(mean)), axis=axes)  # biased, two passes
                n = y.size // mean.shape[0]
                r = st[name]
                new[name] = {"mean": (1 - BN_MOMENTUM) * r["mean"] + BN_MOMENTUM * lax.stop_gradient(mean),
                             "var": (1 - BN_MOMENTUM) * r["var"] + BN_MOMENTUM * lax.stop_gradient(var) * (n / (n - 1))}
            else:
                mean, var = st[name]["mean"], st[name]["var"]
            scale = lax.rsqrt(var + BN_EPS) * p["g"]
            return (y - per_channel(mean)) * per_channel(scale) + per_channel(p["b"])

        x = act(unit("stem", x, 1))
        for name, stride, project in blocks:
            body = unit(name + "/conv2", act(unit(name + "/conv1", x, stride)), 1)
            x = act(body + (unit(name + "/shortcut", x, stride) if project else x))
        return jnp.mean(x, axis=spatial), (new if training else st)

    return params, stats, apply, c
