from django.urls import path

from identity_app import views

app_name = "identity"

urlpatterns = [
    path("sso/<slug:slug>/start", views.start, name="start"),
    path("sso/callback", views.callback, name="callback"),
    path("sso/<slug:slug>/backchannel-logout", views.backchannel_logout, name="backchannel-logout"),
    path("sso/break-glass/<str:token>", views.break_glass, name="break-glass"),
    path("sso/sign-out", views.sign_out, name="sign-out"),
]
