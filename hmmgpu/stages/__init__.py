"""HMMER's search stages written once above the devices: the stage interface, the filter cascade, the post-filter plan, the exact merge, profiles and statistics."""
