"""`podctl plan`'s library: what a model costs, in dollars and days, on every system.

core.plan (podctl.plan) plans several systems; frontier.frontier (podctl.frontier) every
size of each; mfu.py holds the published MFU figures and the break-even rule; fit.py the
memory check; bill.py the project's bill. Prices come from podctl/money/prices.py.
"""
