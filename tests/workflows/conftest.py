from tests.consumers.gateway.conftest import gateways

__all__ = ["gateways"]
