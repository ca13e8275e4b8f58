"""gRPC plumbing shared by the master and PS clients."""

import os
import random
import time

import grpc

# The Go side's limit (internal/rpc.MaxMessageSize): a model-sized message.
MAX_MESSAGE = 256 << 20


class ElasticDLError(Exception):
    """Bad use of the SDK, or a job it cannot go on with."""


class Unavailable(ElasticDLError):
    """A peer stayed unreachable for the whole retry budget."""


# Where the backend put this process's certificate, key and the job's CA
# (internal/cluster.EnvTLSDir); unset: the job runs with --tls=false.
TLS_DIR_ENV = "ELASTICDL_TLS_DIR"


def _read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


def credentials():
    """The job's mutual-TLS credentials, or None when the job runs without
    TLS (then every channel is plaintext, and the Go side says so)."""
    d = os.environ.get(TLS_DIR_ENV)
    if not d:
        return None
    try:
        return grpc.ssl_channel_credentials(root_certificates=_read(d, "ca.crt"), private_key=_read(d, "tls.key"),
                                            certificate_chain=_read(d, "tls.crt"))
    except OSError as e:
        raise ElasticDLError("$%s: %s" % (TLS_DIR_ENV, e)) from None


def channel(addr, role):
    """A channel to the job's server of role ("master" or "ps"). With TLS
    the server must hold the job's certificate for that role: every
    certificate of a role carries the DNS name ROLE.elasticdl, which is
    what grpcio can check (pods move, so their addresses are not in it)."""
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    creds = credentials()
    if creds is None:
        return grpc.insecure_channel(addr, options=options)
    options.append(("grpc.ssl_target_name_override", role + ".elasticdl"))
    return grpc.secure_channel(addr, creds, options=options)


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
                raise Unavailable("%s: unavailable for %.0fs, giving up: %s" % (what, timeout, e.details())) from None
            time.sleep(backoff * (0.8 + 0.4 * random.random()))
            backoff = min(2 * backoff, 1.0)
