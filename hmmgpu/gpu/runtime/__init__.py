"""The GPU runtime the kernel families share: driver, devices, compilation, lane arithmetic."""
