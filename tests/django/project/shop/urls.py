from django.urls import path

from shop.orders import views

urlpatterns = [path("orders", views.create_order)]
