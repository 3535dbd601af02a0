"""The operator's page: `OperatorPage`, a plain ASGI application (no framework, no script in
the page), served by `durability ui URL` or mounted in one's own app.

| module | owns |
|---|---|
| `app` | routing, reading requests, answering (HTML or JSON), a store down as a 503 |
| `pages` | the HTML, every piece of user data escaped on its way in |
| `guard` | who may act: the token, the confirmation's nonce, the origin check |
"""

from durability.web.app import OperatorPage
from durability.web.guard import SHORTEST_TOKEN, Guard

__all__ = ["SHORTEST_TOKEN", "Guard", "OperatorPage"]
