"""gRPC plumbing shared by the master and PS clients."""

import random
import time

import grpc

# The Go side's limit (internal/rpc.MaxMessageSize): a model-sized message.
MAX_MESSAGE = 256 << 20


class ElasticDLError(Exception):
    """Bad use of the SDK, or a job it cannot go on with."""


def channel(addr):
    return grpc.insecure_channel(addr, options=[
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ])


def methods(ch, service, table):
    """Callables for a service's unary methods: table maps an attribute
    name to (method, request class, response class)."""
    return {attr: ch.unary_unary("/%s/%s" % (service, name), request_serializer=req.SerializeToString,
                                 response_deserializer=resp.FromString)
            for attr, (name, req, resp) in table.items()}


def retry_unavailable(call, timeout, what):
    """Runs call, retrying UNAVAILABLE (the peer is down or being
    relaunched) with jittered backoff for up to timeout seconds."""
    deadline, backoff = None, 0.05
    while True:
        try:
            return call()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            if now > deadline:
                raise ElasticDLError("%s: unavailable for %.0fs, giving up: %s" % (what, timeout, e.details())) from None
            time.sleep(backoff * (0.8 + 0.4 * random.random()))
            backoff = min(2 * backoff, 1.0)
