#!/bin/sh
exec tick "$GREETING"
