"""Engram's own methods get their params as the plain JSON they are: pygls would copy them through
``json`` again and make a namedtuple class per object (0.5 ms of the event loop per
``engram/explain``), renaming keys that are not identifiers and dropping ``type_name``."""

from __future__ import annotations

import json

from engram_lsp.server import create_server


def test_engram_methods_params_stay_plain_json():
    protocol = create_server().protocol
    params = {"textDocument": {"uri": "file:///x.py"}, "type_name": "kept",
              "range": {"start": {"line": 3, "character": 0}, "end": {"line": 9, "character": 0}},
              "not-an-identifier": [{"class": 1}]}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "engram/explain", "params": params})
    message = json.loads(body, object_hook=protocol.structure_message)
    assert (message.id, message.method, message.jsonrpc) == (7, "engram/explain", "2.0")
    assert message.params == params and type(message.params) is dict
    note = json.loads(json.dumps({"jsonrpc": "2.0", "method": "engram/custom"}),
                      object_hook=protocol.structure_message)
    assert note.method == "engram/custom" and note.params is None and not hasattr(note, "id")
    # an LSP method is still structured into its lsprotocol type
    hover = json.loads(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "textDocument/hover",
                                   "params": {"textDocument": {"uri": "file:///x.py"},
                                              "position": {"line": 1, "character": 2}}}),
                       object_hook=protocol.structure_message)
    assert hover.params.position.line == 1
