"""The standalone compile harness (see obsidian "Runbook"), one concern per module, no import cycle:

- :mod:`mc.harness.probes`: the measuring tools (raw-output spy, eager parity, memory, guards);
- :mod:`mc.harness.record`: :class:`~mc.harness.record.HarnessRecord`, the plain record of one run;
- :mod:`mc.harness.run`: drives the controller through warm-up and steady state, fills the record;
- :mod:`mc.harness.verdict`: the checks and the printed table, built from the record alone;
- :mod:`mc.harness.cli`: flags, config resolution and ``main`` (scripts/mc_compile_harness.py).
"""
