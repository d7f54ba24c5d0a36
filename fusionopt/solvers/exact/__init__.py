"""Exact methods: a proven optimum over their plan space, or a certified gap. The fusion DP,
brute force, CP-SAT and MILP models, the closed forms, and the exact methods of the parameter
server, the decoupled all-reduce and full sharding."""
