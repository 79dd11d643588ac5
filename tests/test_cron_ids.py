"""Cron ids are never reused: Runs and task identities name a cron by id for good."""


def test_a_new_cron_never_gets_the_id_of_a_deleted_one(client, auth, make_cron):
    first = make_cron(name="first")
    second = make_cron(name="second")
    response = client.delete("/open/crons", json=[second["id"]], headers=auth)
    assert response.status_code == 200
    third = make_cron(name="third")
    assert third["id"] not in (first["id"], second["id"])
    assert third["id"] > second["id"]
