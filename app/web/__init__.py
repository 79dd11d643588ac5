"""The web layer: the Flask app and its blueprints, serving on waitress, the page."""
