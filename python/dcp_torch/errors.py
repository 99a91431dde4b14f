"""The errors dcp_torch raises for what users get wrong (besides ValueError
for bad arguments and the planner client's PlannerError)."""


class RankDivergedError(RuntimeError):
    """This rank's batch, plan or progress differs from the other ranks'."""


class EmptyBatchError(ValueError):
    """The sampler yielded a global batch without samples."""
