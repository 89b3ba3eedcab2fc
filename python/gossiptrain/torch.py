"""PyTorch: a module's parameters as one float32 vector that a gossiptrain.Peer averages.

    flat = gossiptrain.torch.flatten_parameters(model)   # every parameter now a view of flat
    peer = gossiptrain.Peer(flat, seeds=[...])
    for x, y in data:
        loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
        peer.step()                                       # mixes into flat: the model sees it
"""
import torch

__all__ = ["flatten_parameters", "parameter_views"]


def flatten_parameters(module):
    """Copies every parameter of `module` into one new contiguous float32 vector on their device
    and makes each parameter a view of its slice (parameter.data), so that training and the
    peer's mixing change the same memory. Returns the vector. Optimizers keep working: they hold
    the parameter objects, whose data now lives in the vector (but call it before an optimizer
    such as Adam has made state shaped after the old tensors)."""
    params = list(module.parameters())
    if not params:
        raise ValueError("gossiptrain.torch.flatten_parameters: the module has no parameters")
    devices = {p.device for p in params}
    if len(devices) != 1:
        raise ValueError("gossiptrain.torch.flatten_parameters: parameters on several devices: %s"
                         % sorted(map(str, devices)))
    flat = torch.empty(sum(p.numel() for p in params), dtype=torch.float32,
                       device=params[0].device)
    views = parameter_views(flat, [p.shape for p in params])
    with torch.no_grad():
        for p, v in zip(params, views):
            v.copy_(p.detach().reshape(v.shape).to(torch.float32))
            p.data = v
    return flat


def parameter_views(flat, shapes):
    """Views of `flat` with the given shapes, in order (the layout flatten_parameters uses)."""
    views, offset = [], 0
    for s in shapes:
        k = 1
        for d in s:
            k *= d
        views.append(flat[offset:offset + k].view(s))
        offset += k
    if offset != flat.numel():
        raise ValueError("gossiptrain.torch.parameter_views: the shapes hold %d values, the "
                         "vector %d" % (offset, flat.numel()))
    return views
