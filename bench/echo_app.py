"""The baseline: a bare Flask app that parses the same JSON body and echoes it back."""
import json

from flask import Flask, Response, request


def create_app():
    app = Flask("echo")

    @app.post("/<controller>/<hook>")
    def echo(controller, hook):
        body = json.loads(request.get_data())
        return Response(json.dumps(body), mimetype="application/json")

    return app
