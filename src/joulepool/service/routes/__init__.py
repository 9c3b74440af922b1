"""The HTTP API's routes, one `APIRouter` per resource (API.md); `service.app` wires them."""
