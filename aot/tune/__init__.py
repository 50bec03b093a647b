"""Per-region flag search: candidate flag sets per target (``candidates``), compiled as content-
addressed jobs, timed on the region's real device and checked against onnxruntime (``search``);
the host runtime's driver and worker count chosen by measurement (``runtime``)."""
