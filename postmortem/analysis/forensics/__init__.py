"""What the faulting instruction touched: lane addresses, their regions, the kernel arguments."""
