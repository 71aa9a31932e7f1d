"""`podctl plan`'s library: what a model costs, in dollars and days, on every system.

core.plan (podctl.plan) plans several systems; frontier.frontier (podctl.frontier) every
size of each; mfu.py holds the published runs' MFU (data/mfu.toml, one formula), its band
and the break-even rule; fit.py the memory check; bill.py the project's bill; findings.py
what a comparison says about itself. Prices come from podctl/money/prices.py.
"""
