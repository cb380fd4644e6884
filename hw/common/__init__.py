"""What every experiment's GPU code shares: PTX timer helpers, host-mapped buffers, launch environment and
destination targets, symmetric memory and the NCCL transfer. GPU libraries are imported inside functions."""
