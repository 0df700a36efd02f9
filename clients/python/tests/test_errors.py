import os
import re
import unittest

import axsched
from axsched.errors import error_from_response

# clients/python/tests -> the repository root
SERVER_ERRORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "ipc", "errors.go")

# The net/http constants the server's table uses, by name.
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
    """(code, status name) of every &Error{Code: ..., Status: http.X} literal."""
    return re.findall(r'&Error\{\s*Code:\s*"([^"]+)",\s*Status:\s*http\.(\w+)', src)


class ErrorCodesMatchServerTest(unittest.TestCase):
    """Fails when the codes of the sidecar (ipc/errors.go, its errorTable)
    and those of this client drift apart. Skips outside the repository."""

    def test_codes_match_server(self):
        if not os.path.exists(SERVER_ERRORS):
            self.skipTest(f"{SERVER_ERRORS} not found (the package is used outside the ax repository)")
        with open(SERVER_ERRORS, encoding="utf-8") as f:
            src = f.read()
        table = server_table(src)
        self.assertTrue(table, f"found no &Error{{Code: ..., Status: ...}} in {SERVER_ERRORS}: update this test to its layout")
        # Only the codes listed in errorTable count.
        m = re.search(r"var errorTable = \[\]\*Error\{(.*?)\n\}", src, re.S)
        self.assertIsNotNone(m, f"no errorTable in {SERVER_ERRORS}: update this test to its layout")
        listed = re.findall(r"\w+", m.group(1))
        names = dict(re.findall(r'(Err\w+)\s*=\s*&Error\{\s*Code:\s*"([^"]+)"', src))
        listed_codes = [names[n] for n in listed if n in names]
        self.assertEqual(len(listed_codes), len(listed), f"errorTable names an error this test cannot resolve: {listed}")
        server_codes = [c for c, _ in table if c in listed_codes]
        client_codes = list(axsched.ERROR_CODES)
        missing = [c for c in server_codes if c not in client_codes]
        extra = [c for c in client_codes if c not in server_codes]
        self.assertEqual(missing, [], "server codes unknown to axsched: add an exception to ERROR_CODES in axsched/errors.py")
        self.assertEqual(extra, [], f"axsched codes the server ({SERVER_ERRORS}) does not declare")
        self.assertEqual(client_codes, listed_codes, "keep ERROR_CODES in the order of the server's errorTable")
        for code, status_name in table:
            with self.subTest(code=code):
                self.assertIn(status_name, GO_STATUS, "add this net/http constant to GO_STATUS")
                self.assertEqual(axsched.ERROR_CODES[code].default_status, GO_STATUS[status_name])

    def test_parser_sees_a_drift(self):
        src = 'ErrX = &Error{Code: "brand_new", Status: http.StatusTeapot, Message: "x"}'
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
