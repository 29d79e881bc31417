"""``streamcrew demo``: the Black Friday run a newcomer sees first."""

from consumers.demo.run import DemoOptions, run_demo

__all__ = ["DemoOptions", "run_demo"]
