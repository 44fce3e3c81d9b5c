"""A manager's address proof (issue 23, hole 2; the proof itself: ``protocol.node_auth``).

``POST /managers`` (an admin key) names a new manager's id, HTTP URL and Raft address.
Before the leader records it, counts its Raft node or ever calls it with a credential, it
challenges that URL with a fresh nonce and no credential (``AddressCheck``); the manager
there answers with its own id and addresses and their proof under the cluster secret
(``AddressProver``). A listener of someone else's therefore learns a nonce and nothing
else, and the add is refused with nothing done. A new manager answers while it waits to
be added (``manager/joining.py``), so it is started first and added then.
"""

from __future__ import annotations

from dataclasses import replace

from manager.config import ManagerConfig
from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.node_auth import address_proof, new_nonce, proof_holds
from protocol.requests import AddressChallenge, ManagerRef
from runtime.http_api import App, json_response, request_params
from runtime.http_client import HttpAnswer, JsonHttpClient, PeerLink
from runtime.http_server import HttpRequest, HttpResponse

PROOF_PATH = "/managers/proof"
_SHOWN_CHARS_MAX = 200
"""Of what an address that failed the check answered, shown in the refusal."""


class AddressProver:
    """Answers a challenge with this manager's own id and addresses, as the other managers
    know them (its entry in its peers)."""

    def __init__(self, config: ManagerConfig) -> None:
        (me,) = (p for p in config.peers if p.manager_id == config.manager_id)
        self._secret = config.secret
        self._me = me

    def answer(self, challenge: AddressChallenge) -> dict[str, object]:
        me = self._me
        proof = address_proof(
            self._secret, challenge.nonce, me.manager_id, me.http_url, me.raft_address
        )
        return {
            "manager_id": me.manager_id,
            "http_url": me.http_url,
            "raft_address": me.raft_address,
            "proof": proof,
        }


def add_proof_route(app: App, prover: AddressProver, limits: Limits) -> None:
    """``POST /managers/proof``: open (it proves this manager to whoever asks, and the proof
    names this manager's own addresses, so it stands for nothing else)."""

    @app.post(PROOF_PATH, Action.OPEN)
    def prove(http: HttpRequest) -> HttpResponse:
        return json_response(prover.answer(AddressChallenge.parse(request_params(http), limits)))


class AddressCheck:
    """The leader's check before ``AddManager``: one attempt, no credential
    (``PeerLink.without_credential``), a client of its own per check (the addresses are
    an admin's choice: none is kept)."""

    def __init__(self, secret: str, limits: Limits, link: PeerLink) -> None:
        self._secret = secret
        self._limits = limits
        self._once = replace(limits, http_retries_max=1)
        self._link = link.without_credential()

    def check(self, ref: ManagerRef) -> None:
        """Return when the manager at ``ref.http_url`` proved it is ``ref`` and holds the
        cluster secret; else raise 400 INVALID_FIELD saying why (nothing was done)."""
        nonce = new_nonce()
        where = f"manager {ref.manager_id} at {ref.http_url}"
        client = JsonHttpClient(self._once, self._link)
        try:
            answer = client.call(
                "POST",
                f"{ref.http_url}{PROOF_PATH}",
                {"nonce": nonce},
                timeout_s=self._limits.manager_proof_timeout_s,
            )
        except RaftQError as exc:
            raise _refused(
                f"{where} did not answer the address check ({exc.message}): start the new "
                "manager first (it answers while it waits to be added), then add it"
            ) from None
        finally:
            client.close()
        claimed = _claimed(answer)
        if claimed is None:
            raise _refused(
                f"{where} did not answer the address check as a manager does (HTTP "
                f"{answer.status}: {_shown(answer.body)}): is it a manager of this version?"
            )
        manager_id, http_url, raft_address, proof = claimed
        if (manager_id, http_url, raft_address) != (ref.manager_id, ref.http_url, ref.raft_address):
            raise _refused(
                f"the manager at {ref.http_url} says it is manager {manager_id} at "
                f"{_shown(http_url)} (Raft {_shown(raft_address)}), not manager "
                f"{ref.manager_id} at {ref.http_url} (Raft {ref.raft_address}): give the "
                "id and addresses of its own node file"
            )
        if not proof_holds(self._secret, nonce, manager_id, http_url, raft_address, proof):
            raise _refused(f"{where} did not prove that it holds the cluster secret")


def _claimed(answer: HttpAnswer) -> tuple[int, str, str, object] | None:
    body = answer.body
    if answer.status != 200 or not isinstance(body, dict):
        return None
    manager_id, http_url, raft_address = (
        body.get("manager_id"),
        body.get("http_url"),
        body.get("raft_address"),
    )
    if not isinstance(manager_id, int) or isinstance(manager_id, bool):
        return None
    if not isinstance(http_url, str) or not isinstance(raft_address, str):
        return None
    return manager_id, http_url, raft_address, body.get("proof")


def _shown(value: object) -> str:
    return repr(value)[:_SHOWN_CHARS_MAX]


def _refused(message: str) -> RaftQError:
    return RaftQError(ErrorCode.INVALID_FIELD, message)
