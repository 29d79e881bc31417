"""A worker ``--app`` module that makes CrewAI absent for its worker, as on the bare install: ``sys.modules["crewai"] = None``
makes ``find_spec("crewai")`` answer None and ``import crewai`` fail (the app modules load before the built-in agents)."""

import sys

sys.modules["crewai"] = None  # type: ignore[assignment]
