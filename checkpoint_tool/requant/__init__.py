"""Offline shared-expert requantization: which layers, the source viewed as requantized, the plan.

- ``select``: the request (``--requantize-shared mxfp4 --requantize-layers 10-20|all|auto``)
  and the layers it picks;
- ``error``: what requantizing a layer costs (weight-space and MoE output error);
- ``view``: the catalog as it will be, with the chosen shared experts as Quark MXFP4;
- ``plan``: the ordinary planner on that view, pieces pointed back at the source.

The quantizer itself is ``quant.requant``; the executor's node ``execute.requant_node``.

Example::

    plan = plan_with_requant(catalog, PlanOptions(target="vllm-0.33-rocm-aiter-fse"),
                             RequantRequest.parse("mxfp4", "1-2", None))
"""
