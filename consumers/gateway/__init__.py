"""The HTTP gateway (contract §6): FastAPI on uvicorn in front of the producer and the job records."""

from consumers.gateway.app import create_app
from consumers.gateway.server import run_gateway
from consumers.gateway.settings import GatewaySettings

__all__ = ["GatewaySettings", "create_app", "run_gateway"]
