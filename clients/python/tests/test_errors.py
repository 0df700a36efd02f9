import os
import re
import unittest

import axsched
from axsched.errors import error_from_response

# clients/python/tests -> the repository root: the error table of the API,
# written once in Go (package axapi of the Go client's module).
SERVER_ERRORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "go", "axapi", "codes.go")

# The net/http constants the table uses, by name.
GO_STATUS = {
    "StatusBadRequest": 400,
    "StatusNotFound": 404,
    "StatusMethodNotAllowed": 405,
    "StatusConflict": 409,
    "StatusRequestEntityTooLarge": 413,
    "StatusTooManyRequests": 429,
    "StatusInternalServerError": 500,
    "StatusServiceUnavailable": 503,
}


def server_table(src):
    """(code, status name) of every row {Code: CodeX, Status: http.Y} of the
    table, in its order, with CodeX resolved through its constant."""
    consts = dict(re.findall(r'^\s*(Code\w+)\s*=\s*"([^"]+)"', src, re.M))
    rows = re.findall(r'\{Code:\s*(Code\w+),\s*Status:\s*http\.(\w+)', src)
    return [(consts.get(name, name), status) for name, status in rows]


class ErrorCodesMatchServerTest(unittest.TestCase):
    """Fails when the codes of the API (clients/go/axapi/codes.go, its
    errorTable, which the sidecar serves) and those of this client drift
    apart. Skips outside the repository."""

    def test_codes_match_server(self):
        if not os.path.exists(SERVER_ERRORS):
            self.skipTest(f"{SERVER_ERRORS} not found (the package is used outside the ax repository)")
        with open(SERVER_ERRORS, encoding="utf-8") as f:
            src = f.read()
        table = server_table(src)
        self.assertTrue(table, f"found no {{Code: ..., Status: ...}} row in {SERVER_ERRORS}: update this test to its layout")
        unresolved = [c for c, _ in table if c.startswith("Code")]
        self.assertEqual(unresolved, [], f"rows of {SERVER_ERRORS} name a constant this test cannot resolve")
        server_codes = [c for c, _ in table]
        client_codes = list(axsched.ERROR_CODES)
        missing = [c for c in server_codes if c not in client_codes]
        extra = [c for c in client_codes if c not in server_codes]
        self.assertEqual(missing, [], "server codes unknown to axsched: add an exception to ERROR_CODES in axsched/errors.py")
        self.assertEqual(extra, [], f"axsched codes the server ({SERVER_ERRORS}) does not declare")
        self.assertEqual(client_codes, server_codes, "keep ERROR_CODES in the order of the server's errorTable")
        for code, status_name in table:
            with self.subTest(code=code):
                self.assertIn(status_name, GO_STATUS, "add this net/http constant to GO_STATUS")
                self.assertEqual(axsched.ERROR_CODES[code].default_status, GO_STATUS[status_name])

    def test_parser_sees_a_drift(self):
        src = 'const (\n\tCodeBrandNew = "brand_new"\n)\nvar errorTable = []ErrorCode{\n\t{Code: CodeBrandNew, Status: http.StatusTeapot, Message: "x"},\n}'
        self.assertEqual(server_table(src), [("brand_new", "StatusTeapot")])


class ExceptionClassesTest(unittest.TestCase):
    def test_hierarchy(self):
        for code, cls in axsched.ERROR_CODES.items():
            with self.subTest(code=code):
                self.assertTrue(issubclass(cls, axsched.AxError))
                self.assertEqual(cls.default_code, code)
                e = cls("m")
                self.assertEqual((e.code, e.status, e.retry_after, e.message), (code, None, None, "m"))
        self.assertTrue(issubclass(axsched.InvalidJSON, axsched.BadRequest))
        self.assertTrue(issubclass(axsched.BadRequest, ValueError))
        self.assertTrue(issubclass(axsched.Unavailable, axsched.AxError))

    def test_from_response(self):
        e = error_from_response(429, b'{"error":{"code":"queue_full","message":"full"}}', 2.0)
        self.assertIsInstance(e, axsched.QueueFull)
        self.assertEqual((e.status, e.code, e.message, e.retry_after), (429, "queue_full", "full", 2.0))
        self.assertEqual((e.depth, e.limit), (None, None))
        e = error_from_response(429, b'{"error":{"code":"queue_full","message":"full","depth":850,"limit":1000}}')
        self.assertEqual((e.depth, e.limit), (850, 1000))
        e = error_from_response(429, b'{"error":{"code":"queue_full","message":"full","depth":"850","limit":true}}')
        self.assertEqual((e.depth, e.limit), (None, None))
        e = error_from_response(503, b"upstream down")
        self.assertIsInstance(e, axsched.NotReady)
        self.assertIsNone(e.code)
        e = error_from_response(400, b"x" * 2000)
        self.assertTrue(e.message.endswith("...") and len(e.message) == 515)
        self.assertEqual(repr(axsched.NotFound("gone", status=404)),
                         "NotFound(message='gone', status=404, code='not_found', retry_after=None)")


if __name__ == "__main__":
    unittest.main()
