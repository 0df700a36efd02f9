import unittest
from datetime import datetime, timedelta, timezone

from axsched import _wire
from axsched._wire import format_duration, format_time, parse_duration, parse_retry_after, parse_time


class FormatDurationTest(unittest.TestCase):
    def test_like_go(self):
        cases = [
            (0, "0s"),
            (0.0, "0s"),
            (1.5, "1.5s"),
            (timedelta(milliseconds=250), "250ms"),
            (0.25, "250ms"),
            (30, "30s"),
            (90, "1m30s"),
            (3600, "1h0m0s"),
            (timedelta(hours=1, minutes=2, seconds=3, milliseconds=500), "1h2m3.5s"),
            (timedelta(days=2), "48h0m0s"),
            (timedelta(microseconds=1), "1\u00b5s"),
            (1.5e-6, "1.5\u00b5s"),
            (1e-9, "1ns"),
            (0.1, "100ms"),
            (-2.25, "-2.25s"),
            (timedelta(minutes=-30), "-30m0s"),
            (1.000000001, "1.000000001s"),
        ]
        for value, want in cases:
            with self.subTest(value=value):
                self.assertEqual(format_duration(value), want)

    def test_refuses_bad_types(self):
        for bad in (True, "5s", None, [1]):
            with self.subTest(bad=bad), self.assertRaises(TypeError):
                format_duration(bad)
        with self.assertRaises(ValueError):
            format_duration(float("nan"))

    def test_round_trip(self):
        for v in (timedelta(0), timedelta(seconds=1.5), timedelta(hours=25, microseconds=7), timedelta(milliseconds=-3)):
            with self.subTest(v=v):
                self.assertEqual(parse_duration(format_duration(v)), v)


class ParseDurationTest(unittest.TestCase):
    def test_valid(self):
        cases = {
            "0": timedelta(0),
            "30s": timedelta(seconds=30),
            "1.5s": timedelta(seconds=1.5),
            "250ms": timedelta(milliseconds=250),
            "1h2m3.5s": timedelta(hours=1, minutes=2, seconds=3.5),
            "1us": timedelta(microseconds=1),
            "1\u00b5s": timedelta(microseconds=1),
            "1\u03bcs": timedelta(microseconds=1),
            "1500ns": timedelta(microseconds=1),
            "-1.5s": timedelta(seconds=-1.5),
            "+2m": timedelta(minutes=2),
            ".5s": timedelta(milliseconds=500),
            "2.s": timedelta(seconds=2),
        }
        for text, want in cases.items():
            with self.subTest(text=text):
                self.assertEqual(parse_duration(text), want)

    def test_invalid(self):
        for text in ("", "5", "s", "1x", "1.5", ".s", "-", "1s 2s", "1d"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_duration(text)


class TimeTest(unittest.TestCase):
    def test_format(self):
        t = datetime(2026, 1, 2, 15, 4, 5, 250000, tzinfo=timezone.utc)
        self.assertEqual(format_time(t), "2026-01-02T15:04:05.25Z")
        self.assertEqual(format_time(t.replace(microsecond=0)), "2026-01-02T15:04:05Z")
        plus2 = timezone(timedelta(hours=2))
        self.assertEqual(format_time(datetime(2026, 1, 2, 17, 4, 5, tzinfo=plus2)), "2026-01-02T15:04:05Z")

    def test_format_refuses_naive(self):
        with self.assertRaises(ValueError) as cm:
            format_time(datetime(2026, 1, 2), "run_at")
        self.assertIn("run_at", str(cm.exception))
        self.assertIn("timezone.utc", str(cm.exception))

    def test_parse(self):
        utc = timezone.utc
        cases = {
            "2026-01-02T15:04:05Z": datetime(2026, 1, 2, 15, 4, 5, tzinfo=utc),
            "2026-01-02T15:04:05.123Z": datetime(2026, 1, 2, 15, 4, 5, 123000, tzinfo=utc),
            "2026-01-02T15:04:05.1Z": datetime(2026, 1, 2, 15, 4, 5, 100000, tzinfo=utc),
            "2026-01-02T15:04:05.123456789Z": datetime(2026, 1, 2, 15, 4, 5, 123456, tzinfo=utc),
            "2026-01-02T17:04:05+02:00": datetime(2026, 1, 2, 15, 4, 5, tzinfo=utc),
            "2026-01-02T10:04:05.5-05:00": datetime(2026, 1, 2, 15, 4, 5, 500000, tzinfo=utc),
        }
        for text, want in cases.items():
            with self.subTest(text=text):
                got = parse_time(text)
                self.assertEqual(got, want)
                self.assertEqual(got.utcoffset(), timedelta(0))

    def test_parse_invalid(self):
        for text in ("", "2026-01-02", "2026-01-02T15:04:05", "yesterday", "2026-13-02T15:04:05Z"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_time(text)


class RetryAfterTest(unittest.TestCase):
    def test_values(self):
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after(""))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertEqual(parse_retry_after("2"), 2.0)
        self.assertEqual(parse_retry_after(" 0 "), 0.0)
        now = datetime(2026, 1, 2, 15, 4, 5, tzinfo=timezone.utc).timestamp()
        self.assertEqual(parse_retry_after("Fri, 02 Jan 2026 15:04:08 GMT", now=now), 3.0)
        self.assertEqual(parse_retry_after("Fri, 02 Jan 2026 15:04:00 GMT", now=now), 0.0)


class HeaderTest(unittest.TestCase):
    def test_decode(self):
        raw = "order|42-\u00fc\u65e5\u672c".encode("utf-8").decode("latin-1")  # as http.server gives it
        self.assertEqual(_wire.decode_header_value(raw), "order|42-\u00fc\u65e5\u672c")
        self.assertEqual(_wire.decode_header_value("plain"), "plain")
        self.assertEqual(_wire.decode_header_value("\u00ff"), "\u00ff")  # not UTF-8: kept
        self.assertIsNone(_wire.decode_header_value(None))


if __name__ == "__main__":
    unittest.main()
