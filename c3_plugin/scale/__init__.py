"""Models on devices: loading policies, checking model paths, precision rules and data-parallel splits."""
