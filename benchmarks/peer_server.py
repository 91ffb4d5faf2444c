"""The peer server of suites 3 and 4 (started by http_servers.start_servers), behind the same stack as ours.

sentence-transformers in the run dtype, one request at a time under a lock: `encode` for texts (its own batching,
32), its modules on padded batches of 32 for token ids (common.SentenceTransformersPeer); base64 or float replies.

    python benchmarks/peer_server.py --model FOLDER --device cuda --port 8081
"""
from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402


def peer_app(folder: Path, device: str):
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from common import SentenceTransformersPeer
    from embedpipe.pipeline.serve.protocol import embeddings_response

    peer, lock = SentenceTransformersPeer(folder, device), threading.Lock()

    def embed(payload: dict) -> bytes:
        inputs = payload["input"]
        inputs = [inputs] if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)) else inputs
        with lock:  # one request at a time
            result = peer.encode(inputs) if isinstance(inputs[0], str) else peer(inputs).numpy()
        return embeddings_response(result.astype(np.float32), payload.get("encoding_format", "float"), "peer", 0)

    async def embeddings(request: Request) -> Response:  # the model runs on the thread pool, off the event loop
        return Response(await run_in_threadpool(embed, await request.json()), media_type="application/json")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvicorn
    uvicorn.run(peer_app(args.model, args.device), host="127.0.0.1", port=args.port, access_log=False,
                log_level="warning")


if __name__ == "__main__":
    main()
